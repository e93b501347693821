/* A small persistent thread pool: the caller plus threads-1 workers split [0, n) into one
 * contiguous range per thread index.
 *
 * A forward pass at a few dozen tokens is a stream of short jobs (a 77-token CLIP-L forward is
 * about 80 of them in 8 ms), and waking a sleeping thread costs tens of microseconds on the
 * machines measured (a virtual machine's cross-core wake-up): half of such a forward went to
 * waiting for workers to wake. So:
 *   - a worker that finished a job spins on the job counter for up to CPU_POOL_SPIN_NS before
 *     it sleeps on a condition variable, and so does the caller waiting for the job's end; the
 *     spin is short, so idle workers still leave the cores to other threads and processes;
 *   - each range is claimed before it runs, by its own thread or, once a thread is done with
 *     its own, by any thread that finds it unclaimed: a worker that is asleep, or that another
 *     process holds off its core, costs the job its range's time, not a wake-up or a time
 *     slice. The range and the thread index passed for it (which scratch it uses) never change
 *     with who runs it, so results do not depend on it;
 *   - a worker that finds itself on the caller's core moves to another one it may run on. After
 *     the pool slept (between two forward passes) the scheduler often woke a worker on the core
 *     of the caller that woke it, where the two took turns at half speed for milliseconds
 *     until the load balancer moved one (a 3.5 ms CLIP forward took 8). */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "common/alloc.h"
#include "kernels/cpu/cpu.h"

/* How long a thread spins for the next job (worker) or the job's end (caller) before it
 * sleeps: longer than the gaps between the ops of a forward pass, short enough to be idle. */
#define CPU_POOL_SPIN_NS 100000

struct cpu_pool {
    int threads;
    pthread_t *tids;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pthread_cond_t done;
    _Atomic uint64_t generation; /* the current job's number (release: its fields are set) */
    _Atomic uint64_t *claimed;   /* [threads]: the job that last claimed that range */
    _Atomic int remaining;       /* ranges of the current job not finished */
    _Atomic int caller_cpu;      /* the core the caller published the current job from */
    bool may_move;               /* no more threads than usable cores: moving off helps */
    int sleepers;                /* workers waiting on wake (under lock) */
    int stop;                    /* under lock */
    /* the current job */
    cpu_range_fn fn;
    void *arg;
    int64_t n, grain;
};

struct worker_arg {
    struct cpu_pool *pool;
    int index;
};

static void range_of(const struct cpu_pool *p, int index, int64_t *b, int64_t *e)
{
    int64_t units = (p->n + p->grain - 1) / p->grain;
    int64_t lo = units * index / p->threads, hi = units * (index + 1) / p->threads;
    *b = lo * p->grain;
    *e = hi * p->grain < p->n ? hi * p->grain : p->n;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    _mm_pause();
#endif
}

static int64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* Range i of job gen for the caller of this, if nobody has it yet. A thread still working on an
 * older job (gen behind) finds every range claimed by a newer one and takes nothing. */
static bool claim(struct cpu_pool *p, int i, uint64_t gen)
{
    uint64_t cur = atomic_load_explicit(&p->claimed[i], memory_order_relaxed);
    return cur < gen && atomic_compare_exchange_strong_explicit(
                            &p->claimed[i], &cur, gen, memory_order_acq_rel,
                            memory_order_relaxed);
}

/* Runs range i of the current job (claimed); the last range to finish wakes the caller. */
static void run_range(struct cpu_pool *p, int i, bool caller)
{
    int64_t b, e;
    range_of(p, i, &b, &e);
    if (b < e)
        p->fn(p->arg, b, e, i);
    if (atomic_fetch_sub_explicit(&p->remaining, 1, memory_order_acq_rel) == 1 && !caller) {
        pthread_mutex_lock(&p->lock); /* the caller may be asleep */
        pthread_cond_signal(&p->done);
        pthread_mutex_unlock(&p->lock);
    }
}

/* This thread's own range first, then any range still unclaimed. */
static void run_ranges(struct cpu_pool *p, int self, uint64_t gen, bool caller)
{
    if (claim(p, self, gen))
        run_range(p, self, caller);
    for (int i = 0; i < p->threads; i++)
        if (i != self && claim(p, i, gen))
            run_range(p, i, caller);
}

/* Moves this worker off the caller's core, if it is there, keeping its affinity mask. */
static void leave_caller_core(struct cpu_pool *p)
{
    const int cpu = atomic_load_explicit(&p->caller_cpu, memory_order_relaxed);
    if (!p->may_move || cpu < 0 || sched_getcpu() != cpu)
        return;
    cpu_set_t all, other;
    if (pthread_getaffinity_np(pthread_self(), sizeof(all), &all) != 0 ||
        cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, &all) || CPU_COUNT(&all) < 2)
        return;
    other = all;
    CPU_CLR(cpu, &other);
    /* the first call migrates the thread now; the second lets it go anywhere again */
    if (pthread_setaffinity_np(pthread_self(), sizeof(other), &other) == 0)
        (void)pthread_setaffinity_np(pthread_self(), sizeof(all), &all);
}

/* Spins until the generation moves past seen (true) or the spin time is over (false). */
static bool spin_for_job(struct cpu_pool *p, uint64_t seen)
{
    const int64_t until = now_ns() + CPU_POOL_SPIN_NS;
    for (int i = 1;; i++) {
        if (atomic_load_explicit(&p->generation, memory_order_acquire) != seen)
            return true;
        cpu_relax();
        if (i % 64 == 0 && now_ns() > until)
            return false;
    }
}

static void *worker_main(void *varg)
{
    struct worker_arg *wa = varg;
    struct cpu_pool *p = wa->pool;
    int index = wa->index;
    weft_free(wa);
    uint64_t seen = 0;
    for (;;) {
        if (!spin_for_job(p, seen)) {
            pthread_mutex_lock(&p->lock);
            p->sleepers++;
            while (atomic_load_explicit(&p->generation, memory_order_acquire) == seen &&
                   !p->stop)
                pthread_cond_wait(&p->wake, &p->lock);
            p->sleepers--;
            pthread_mutex_unlock(&p->lock);
        }
        seen = atomic_load_explicit(&p->generation, memory_order_acquire);
        if (!p->fn) /* the stop job */
            return NULL;
        leave_caller_core(p);
        run_ranges(p, index, seen, false);
    }
}

weft_status_t cpu_pool_create(int threads, struct cpu_pool **pool_p)
{
    struct cpu_pool *p = weft_calloc(1, sizeof(*p));
    if (!p)
        return WEFT_ERR_NOMEM;
    p->threads = threads < 1 ? 1 : threads;
    p->tids = weft_calloc((size_t)p->threads, sizeof(*p->tids));
    p->claimed = weft_calloc((size_t)p->threads, sizeof(*p->claimed));
    if (!p->tids || !p->claimed) {
        weft_free((void *)p->claimed);
        weft_free(p->tids);
        weft_free(p);
        return WEFT_ERR_NOMEM;
    }
    atomic_init(&p->generation, 0);
    atomic_init(&p->remaining, 0);
    atomic_init(&p->caller_cpu, -1);
    p->may_move = p->threads <= weft_kernels_cpu_usable_cores();
    for (int i = 0; i < p->threads; i++)
        atomic_init(&p->claimed[i], 0);
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    p->fn = NULL;
    for (int i = 1; i < p->threads; i++) {
        struct worker_arg *wa = weft_malloc(sizeof(*wa));
        if (wa) {
            wa->pool = p;
            wa->index = i;
        }
        if (!wa || pthread_create(&p->tids[i], NULL, worker_main, wa) != 0) {
            weft_free(wa);
            p->threads = i; /* run with what started */
            break;
        }
    }
    *pool_p = p;
    return WEFT_OK;
}

/* Publishes the job set in p's fields: spinning workers see the generation, sleeping ones are
 * woken (a worker checks the generation under the lock before it waits, and the lock is taken
 * here after the bump, so none sleeps through it). */
static uint64_t publish(struct cpu_pool *p)
{
    const uint64_t gen = atomic_fetch_add_explicit(&p->generation, 1, memory_order_release) + 1;
    pthread_mutex_lock(&p->lock);
    if (p->sleepers > 0)
        pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    return gen;
}

void cpu_pool_destroy(struct cpu_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    p->stop = 1;
    pthread_mutex_unlock(&p->lock);
    p->fn = NULL; /* a worker takes a new generation without a job as the stop */
    (void)publish(p);
    for (int i = 1; i < p->threads; i++)
        pthread_join(p->tids[i], NULL);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    weft_free((void *)p->claimed);
    weft_free(p->tids);
    weft_free(p);
}

void cpu_parallel(struct weft_kctx *ctx, int64_t n, int64_t grain, cpu_range_fn fn, void *arg)
{
    struct cpu_pool *p = ctx->pool;
    if (n <= 0)
        return;
    if (grain < 1)
        grain = 1;
    if (p->threads == 1 || n <= grain) {
        fn(arg, 0, n, 0);
        return;
    }
    /* the previous job's ranges all finished (remaining reached 0): the fields are free; a
     * worker that has not yet looked at them claims nothing of the new job before it sees the
     * generation (release below) */
    p->fn = fn;
    p->arg = arg;
    p->n = n;
    p->grain = grain;
    atomic_store_explicit(&p->caller_cpu, sched_getcpu(), memory_order_relaxed);
    atomic_store_explicit(&p->remaining, p->threads, memory_order_relaxed);
    const uint64_t gen = publish(p);
    run_ranges(p, 0, gen, true);
    const int64_t until = now_ns() + CPU_POOL_SPIN_NS;
    for (int i = 1; atomic_load_explicit(&p->remaining, memory_order_acquire) > 0; i++) {
        cpu_relax();
        if (i % 64 == 0 && now_ns() > until) {
            pthread_mutex_lock(&p->lock);
            while (atomic_load_explicit(&p->remaining, memory_order_acquire) > 0)
                pthread_cond_wait(&p->done, &p->lock);
            pthread_mutex_unlock(&p->lock);
            break;
        }
    }
}
