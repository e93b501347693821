/* The CPU backend's devmem variant (kernels.h): buffers that are not host-visible, with every
 * rule a GPU imposes checked. Each rule broken once, on a fresh context, must be caught: a host
 * pointer given to an op, an op running past its buffer, a freed buffer used, a device pointer
 * given as host memory, a download read before sync, an upload from memory a download has not
 * filled, a wrong size to buf_free, and a direct host access (a fault, in a child process). Kept
 * rules give the plain backend's results bit for bit. And the device names (weft_device_parse),
 * with a GPU asked of a machine that has none. */
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/kernels.h"
#include "test.h"

enum { M = 13, N = 17, KK = 9 };

static void fill_rand(float *x, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f;
    }
}

struct dev {
    const struct weft_kernels *K;
    struct weft_kctx *kc;
    float *x, *w, *y; /* device */
};

static void dev_open(struct dev *d, const float *x, const float *w)
{
    CHECK_OK(weft_kernels_cpu_devmem_create(1, &d->K, &d->kc));
    CHECK(d->K->host_visible == 0 && strcmp(d->K->name, "cpu-devmem") == 0);
    CHECK(weft_kernels_is_cpu(d->K));
    CHECK_OK(d->K->buf_alloc(d->kc, M * KK * 4, (void **)&d->x));
    CHECK_OK(d->K->buf_alloc(d->kc, N * KK * 4, (void **)&d->w));
    CHECK_OK(d->K->buf_alloc(d->kc, M * N * 4, (void **)&d->y));
    d->K->upload(d->kc, d->x, x, M * KK * 4);
    d->K->upload(d->kc, d->w, w, N * KK * 4);
    CHECK_OK(d->K->status(d->kc));
}

static void dev_close(struct dev *d)
{
    d->K->buf_free(d->kc, d->x, M * KK * 4);
    d->K->buf_free(d->kc, d->w, N * KK * 4);
    d->K->buf_free(d->kc, d->y, M * N * 4);
    d->K->destroy(d->kc);
}

/* The context recorded an error and the log says why. */
static void expect_fault(struct dev *d, const char *what, const char *words)
{
    weft_status_t st = d->K->sync(d->kc);
    if (st != WEFT_ERR_INTERNAL || !strstr(test_logged, words)) {
        fprintf(stderr, "%s: status %s, last error '%s' (wanted one with '%s')\n", what,
                weft_status_str(st), test_logged, words);
        exit(1);
    }
    printf("%-48s caught: %s\n", what, test_logged);
    test_logged[0] = '\0';
}

static int is_nan_bits(const float *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &p[i], 4);
        if (u != 0xffffffffu)
            return 0;
    }
    return 1;
}

int main(void)
{
    test_quiet();
    float x[M * KK], w[N * KK], want[M * N], got[M * N], host[M * N];
    fill_rand(x, M * KK, 1);
    fill_rand(w, N * KK, 2);

    /* the reference: the plain backend on host memory */
    const struct weft_kernels *P;
    struct weft_kctx *pc;
    CHECK_OK(weft_kernels_cpu_create(1, &P, &pc));
    CHECK(P->host_visible == 1);
    P->linear(pc, x, KK, w, WEFT_DTYPE_F32, NULL, want, N, M, N, KK, 0);
    P->destroy(pc);

    /* the rules kept: the same bits, and a download holds NaNs until sync */
    struct dev d;
    dev_open(&d, x, w);
    d.K->linear(d.kc, d.x, KK, d.w, WEFT_DTYPE_F32, NULL, d.y, N, M, N, KK, 0);
    memset(got, 0, sizeof(got));
    d.K->download(d.kc, got, d.y, sizeof(got));
    CHECK(is_nan_bits(got, M * N)); /* not yet */
    CHECK_OK(d.K->sync(d.kc));
    CHECK(memcmp(got, want, sizeof(got)) == 0);
    /* copy_rows and fill between buffers */
    d.K->fill(d.kc, d.y, 2.5f, M * N);
    d.K->copy_rows(d.kc, d.y, N, d.x, KK, M, KK);
    d.K->download(d.kc, got, d.y, sizeof(got));
    CHECK_OK(d.K->sync(d.kc));
    CHECK(got[0] == x[0] && got[N * (M - 1) + KK - 1] == x[KK * (M - 1) + KK - 1]);
    CHECK(got[KK] == 2.5f);
    dev_close(&d);

    /* each rule broken */
    dev_open(&d, x, w);
    d.K->linear(d.kc, x, KK, d.w, WEFT_DTYPE_F32, NULL, d.y, N, M, N, KK, 0);
    expect_fault(&d, "host memory given to an op", "argument x");
    dev_close(&d);

    dev_open(&d, x, w);
    d.K->linear(d.kc, d.x, KK, d.w, WEFT_DTYPE_F32, NULL, d.y, N, M + 1, N, KK, 0);
    expect_fault(&d, "an op running past its buffer", "runs past the end");
    dev_close(&d);

    dev_open(&d, x, w);
    d.K->gated_add(d.kc, d.y, N, d.w + N * KK - 2, d.x, KK, 2, 3);
    expect_fault(&d, "a vector argument past its buffer", "argument gate");
    dev_close(&d);

    dev_open(&d, x, w);
    float *gone;
    CHECK_OK(d.K->buf_alloc(d.kc, 64, (void **)&gone));
    d.K->buf_free(d.kc, gone, 64);
    d.K->fill(d.kc, gone, 1.0f, 4);
    expect_fault(&d, "a freed buffer used", "not in a buffer");
    dev_close(&d);

    dev_open(&d, x, w);
    d.K->upload(d.kc, d.y, d.x, 16);
    expect_fault(&d, "device memory given as host memory", "is device memory");
    dev_close(&d);

    dev_open(&d, x, w);
    d.K->download(d.kc, host, d.x, 64);
    d.K->upload(d.kc, d.y, host, 64);
    expect_fault(&d, "an upload of a download not yet synchronised", "sync first");
    dev_close(&d);

    dev_open(&d, x, w);
    d.K->buf_free(d.kc, d.y, 4);
    expect_fault(&d, "buf_free with another size", "not the size");
    dev_close(&d);

    /* a direct host access faults (in a child: the fault ends it) */
    dev_open(&d, x, w);
    fflush(stdout);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        volatile float *p = d.y;
        p[3] = 1.0f;
        _exit(0); /* not reached when the rule holds */
    }
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) != 0));
    printf("%-48s caught: the child ended by signal %d\n", "a direct host write",
           WIFSIGNALED(status) ? WTERMSIG(status) : -1);
    dev_close(&d);

    /* the device names */
    struct weft_device dv;
    char why[200], name[32];
    CHECK_OK(weft_device_parse("cpu-devmem", -1, &dv, why, sizeof(why)));
    CHECK(dv.kind == WEFT_DEVICE_CPU_DEVMEM);
    CHECK_OK(weft_device_parse("cuda:3", -1, &dv, why, sizeof(why)));
    weft_device_name(&dv, name, sizeof(name));
    CHECK(dv.kind == WEFT_DEVICE_CUDA && dv.index == 3 && strcmp(name, "cuda:3") == 0);
    CHECK(weft_device_parse("gpu0", -1, &dv, why, sizeof(why)) == WEFT_ERR_INVALID);
    CHECK(strstr(why, "gpu0") && strstr(why, "cuda:N"));
    CHECK(weft_device_parse("cuda:x", -1, &dv, why, sizeof(why)) == WEFT_ERR_INVALID);
    CHECK_OK(weft_device_parse("auto", 5, &dv, why, sizeof(why)));
    CHECK(dv.kind == WEFT_DEVICE_CPU || dv.kind == WEFT_DEVICE_CUDA);
    /* a GPU that is not there: one clear line, no crash */
    if (weft_gpu_count() == 0) {
        const struct weft_kernels *G;
        struct weft_kctx *gc;
        const struct weft_device cuda0 = {WEFT_DEVICE_CUDA, 0};
        weft_status_t st = weft_kernels_create(&cuda0, 0, &G, &gc, why, sizeof(why));
        CHECK(st == WEFT_ERR_NO_DEVICE || st == WEFT_ERR_UNSUPPORTED);
        CHECK(strstr(why, "cuda:0") && !strchr(why, '\n'));
        printf("%-48s refused: %s\n", "cuda:0 on a machine without a GPU", why);
        CHECK_OK(weft_device_parse("auto", 3, &dv, why, sizeof(why)));
        CHECK(dv.kind == WEFT_DEVICE_CPU);
    }
    return 0;
}
