/* weft bench <what>: benchmark programs (figures go to bench/README.md, never into tests). */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "common/log.h"

struct bench {
    const char *name;
    int (*run)(struct weft_cli *cli);
    const char *summary;
};

static const struct bench benches[] = {
    {"flux", weft_bench_flux, "FLUX forward pass, weft vs Diffusers on torch, same machine"},
    {"flux-run", weft_bench_flux_run, "(internal) one timed weft run for `bench flux`"},
    {"load", weft_bench_load, "sharded vs full-then-shard loading: time and peak RSS per rank"},
    {"load-run", weft_bench_load_run, "(internal) one rank's load for `bench load`"},
    {"cp", weft_bench_cp, "context parallelism: every mode and shape vs one process"},
    {"cp-run", weft_bench_cp_run, "(internal) one rank of `bench cp`"},
    {"comm", weft_bench_comm, "collectives on N processes vs Open MPI and memcpy"},
    {"generate", weft_bench_generate, "one whole image, weft generate vs FluxPipeline on torch"},
    {"gemm", weft_bench_gemm, "CPU GEMM: weft, OpenBLAS, BLIS, oneDNN on FLUX.1's shapes"},
    {"vae", weft_bench_vae, "VAE decode: conv2d GEMM vs direct, tiling, staged pipeline memory"},
    {"vae-run", weft_bench_vae_run, "(internal) one child of `bench vae`"},
    {"text", weft_bench_text, "CLIP and T5 encoders and tokenizers, weft vs transformers"},
    {"text-run", weft_bench_text_run, "(internal) one side of `bench text`"},
    {"plan", weft_bench_plan, "weft plan --auto's predicted memory vs the workers' peak"},
    {"serve", weft_bench_serve, "a mixed job stream: [parallel] mode = auto vs fixed layouts"},
};
#define N_BENCHES (sizeof(benches) / sizeof(benches[0]))

static void help(FILE *out)
{
    fprintf(out, "usage: weft bench <what> [options]   (`weft bench <what> --help`)\n\n");
    for (size_t i = 0; i < N_BENCHES; i++)
        if (benches[i].summary[0] != '(')
            fprintf(out, "  %-10s %s\n", benches[i].name, benches[i].summary);
}

int weft_cmd_bench(struct weft_cli *cli)
{
    if (cli->argc < 2 || weft_cli_is_help(cli->argv[1])) {
        help(cli->argc < 2 ? stderr : stdout);
        return cli->argc < 2 ? 2 : 0;
    }
    for (size_t i = 0; i < N_BENCHES; i++) {
        if (strcmp(cli->argv[1], benches[i].name) == 0) {
            struct weft_cli sub = *cli;
            sub.argc--;
            sub.argv++;
            return benches[i].run(&sub);
        }
    }
    WEFT_LOG_ERROR("bench", "unknown benchmark '%s' (see `weft bench --help`)", cli->argv[1]);
    return 2;
}
