/* weft bench gemm: runs bench/gemm.c's program (weft-bench-gemm, beside the build), which links
 * oneDNN and opens OpenBLAS and BLIS itself; this binary stays free of all three. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "common/alloc.h"
#include "common/log.h"

int weft_bench_gemm(struct weft_cli *cli)
{
    const char *prog = WEFT_BENCH_GEMM;
    if (!prog[0] || access(prog, X_OK) != 0) {
        WEFT_LOG_ERROR("bench", "the GEMM benchmark program is not built here (%s)",
                       prog[0] ? prog : "no path");
        return 1;
    }
    char threads[32];
    snprintf(threads, sizeof(threads), "%lld", (long long)cli->conf.kernels.threads);
    char **argv = weft_calloc((size_t)cli->argc + 4, sizeof(*argv));
    if (!argv)
        return 1;
    int n = 0;
    argv[n++] = (char *)prog;
    if (cli->conf.kernels.threads) { /* [kernels] threads for every library */
        argv[n++] = "--threads";
        argv[n++] = threads;
    }
    for (int i = 1; i < cli->argc; i++)
        argv[n++] = cli->argv[i];
    argv[n] = NULL;
    execv(prog, argv);
    WEFT_LOG_ERROR("bench", "%s: cannot run: %s", prog, strerror(errno));
    weft_free(argv);
    return 1;
}
