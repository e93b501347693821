/* A small persistent thread pool: the caller plus threads-1 workers split [0, n) into one
 * contiguous range each. Workers sleep on a condition variable between calls, so they never
 * steal cycles from OpenBLAS's own threads or from other processes sharing the cores. */
#include <pthread.h>
#include <stdatomic.h>

#include "common/alloc.h"
#include "kernels/cpu/cpu.h"

struct cpu_pool {
    int threads;
    pthread_t *tids;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pthread_cond_t done;
    uint64_t generation; /* bumped for each job */
    int pending;         /* workers still running the current job */
    int stop;
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

static void *worker_main(void *varg)
{
    struct worker_arg *wa = varg;
    struct cpu_pool *p = wa->pool;
    int index = wa->index;
    weft_free(wa);
    uint64_t seen = 0;
    for (;;) {
        pthread_mutex_lock(&p->lock);
        while (p->generation == seen && !p->stop)
            pthread_cond_wait(&p->wake, &p->lock);
        if (p->stop) {
            pthread_mutex_unlock(&p->lock);
            return NULL;
        }
        seen = p->generation;
        pthread_mutex_unlock(&p->lock);
        int64_t b, e;
        range_of(p, index, &b, &e);
        if (b < e)
            p->fn(p->arg, b, e, index);
        pthread_mutex_lock(&p->lock);
        if (--p->pending == 0)
            pthread_cond_signal(&p->done);
        pthread_mutex_unlock(&p->lock);
    }
}

weft_status_t cpu_pool_create(int threads, struct cpu_pool **pool_p)
{
    struct cpu_pool *p = weft_calloc(1, sizeof(*p));
    if (!p)
        return WEFT_ERR_NOMEM;
    p->threads = threads < 1 ? 1 : threads;
    p->tids = weft_calloc((size_t)p->threads, sizeof(*p->tids));
    if (!p->tids) {
        weft_free(p);
        return WEFT_ERR_NOMEM;
    }
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
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

void cpu_pool_destroy(struct cpu_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    p->stop = 1;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    for (int i = 1; i < p->threads; i++)
        pthread_join(p->tids[i], NULL);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
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
    pthread_mutex_lock(&p->lock);
    p->fn = fn;
    p->arg = arg;
    p->n = n;
    p->grain = grain;
    p->pending = p->threads - 1;
    p->generation++;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    int64_t b, e;
    range_of(p, 0, &b, &e);
    if (b < e)
        fn(arg, b, e, 0);
    pthread_mutex_lock(&p->lock);
    while (p->pending > 0)
        pthread_cond_wait(&p->done, &p->lock);
    pthread_mutex_unlock(&p->lock);
}
