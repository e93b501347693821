/* weft bench text: FLUX.1's text encoders and tokenizers, weft against transformers on torch in
 * the same run, same machine, same threads:
 *
 *   encoders    a CLIP-L-shaped CLIPTextModel (77 tokens) and a T5-XXL-shaped T5EncoderModel
 *               (one 512-token prompt), fewer layers, random weights written by weft in bf16
 *               (as FLUX.1 ships them), computing in --dtype; each side one kept-loaded process
 *               per encoder, one forward each per round, peak RSS of each process;
 *   t5 per rank T5's peak RSS per rank at tp 1 and tp 2, each rank its own process (weft's
 *               transport over loopback), load and one forward;
 *   tokenizers  prompts per second of weft's CLIP BPE and T5 unigram against transformers'
 *               CLIPTokenizerFast and T5TokenizerFast made from the same files, over the
 *               committed corpus (tests/data/text/corpus.json), one prompt per call.
 *
 * Figures go to bench/README.md ("Text encoders"). */
#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/stats.h"
#include "bench/synth.h"
#include "cli/child.h"
#include "cli/cli.h"
#include "cli/progress.h"
#include "common/alloc.h"
#include "common/log.h"
#include "model/checkpoint.h"
#include "model/plan.h"
#include "text/tokenizer.h"
#include "transport/comm.h"
#include "worker/par_transport.h"
#include "worker/text_encoder.h"

#define CORPUS "tests/data/text/corpus.json"
#define CLIP_TOKENIZER "tests/data/text/tokenizer"
#define T5_TOKENIZER "tests/data/text/tokenizer_2"
#define QUICK_PROMPTS 24

struct text_bench_opts {
    long long layers, t5_tokens;
    const char *python;
    bool no_torch;
    enum weft_dtype dtype; /* the compute dtype of both sides (the weights are bf16) */
    struct weft_bench b;
};

static void help(FILE *out)
{
    fprintf(out,
        "usage: weft bench text [--dtype f32|bf16] [--layers N] [--t5-tokens N]\n"
        "                       [--python PATH | --no-torch] [--rounds N] [--warmup N]\n"
        "                       [--quick] [--json]\n"
        "\n"
        "FLUX.1's text encoders and tokenizers, weft against transformers on torch (PyPI torch\n"
        "+ transformers, run with --python, default python3; skipped when it cannot import\n"
        "them), same threads ([kernels] threads, default all cores):\n"
        "  encoders    CLIP-L's shape (hidden 768, 12 heads, intermediate 3072, vocab 49408,\n"
        "              77 positions) on 77 tokens and T5-XXL's (d_model 4096, 64 heads x 64,\n"
        "              d_ff 10240, vocab 32128) on one --t5-tokens prompt (default 512), each\n"
        "              with --layers layers (default 2), random bf16 weights written to a\n"
        "              temporary folder, computing in --dtype (default f32); ms per forward,\n"
        "              peak RSS of each side's process\n"
        "  t5 per rank T5's peak RSS per rank at tp 1 and tp 2 (one process per rank, load and\n"
        "              one forward)\n"
        "  tokenizers  prompts per second, weft's CLIP BPE and T5 unigram against\n"
        "              CLIPTokenizerFast and T5TokenizerFast from the same files, on\n"
        "              " CORPUS " (77 and 512 tokens, one prompt per call)\n"
        "A round is one pass of every side in turn. --quick: 64-wide 1-layer encoders, a\n"
        "32-token prompt, the first %d prompts.\n\n",
        QUICK_PROMPTS);
    weft_bench_opt_help(out);
}

static int parse(struct weft_cli *cli, struct text_bench_opts *o)
{
    *o = (struct text_bench_opts){-1, -1, "python3", false, WEFT_DTYPE_F32, {0}};
    weft_bench_init(&o->b, "weft bench text");
    for (int i = 1; i < cli->argc; i++) {
        if (weft_cli_is_help(cli->argv[i])) {
            help(stdout);
            return 1;
        }
        int hit = weft_bench_opt(&o->b, cli->argc, cli->argv, &i);
        if (hit < 0)
            return -1;
        if (hit)
            continue;
        const char *v;
        if (strcmp(cli->argv[i], "--no-torch") == 0) {
            o->no_torch = true;
        } else if ((v = weft_cli_opt_value(cli->argc, cli->argv, &i, "--dtype"))) {
            if (weft_bench_dtype_arg(v, &o->dtype) != 0)
                return -1;
        } else if ((v = weft_cli_opt_value(cli->argc, cli->argv, &i, "--python"))) {
            o->python = v;
        } else if ((v = weft_cli_opt_value(cli->argc, cli->argv, &i, "--layers"))) {
            if (weft_cli_parse_int("--layers", v, 1, 48, &o->layers) != 0)
                return -1;
        } else if ((v = weft_cli_opt_value(cli->argc, cli->argv, &i, "--t5-tokens"))) {
            if (weft_cli_parse_int("--t5-tokens", v, 1, 4096, &o->t5_tokens) != 0)
                return -1;
        } else {
            weft_cli_unexpected("bench", "", "weft bench text", cli->argv[i]);
            return -1;
        }
    }
    if (o->layers < 0)
        o->layers = o->b.quick ? 1 : 2;
    if (o->t5_tokens < 0)
        o->t5_tokens = o->b.quick ? 32 : 512;
    return 0;
}

/* The benchmark's ids, the same formula in bench/text_torch.py: CLIP's start token, words, its
 * end token (the highest id: the pooled row); T5's words and </s>. */
static void bench_ids(bool clip, int64_t vocab, int64_t n, int32_t *ids)
{
    for (int64_t i = 0; i < n; i++)
        ids[i] = (int32_t)((i * 7919 + 13) % (clip ? vocab - 2 : vocab));
    if (clip) {
        ids[0] = (int32_t)(vocab - 2);
        ids[n - 1] = (int32_t)(vocab - 1);
    } else {
        ids[n - 1] = 1;
    }
}

/* ---------------------------------------------------------------------------------------- */
/* The weft side: bench text-run                                                             */

/* Print j as one line and delete it. */
static void print_json(cJSON *j)
{
    char *t = cJSON_PrintUnformatted(j);
    printf("%s\n", t ? t : "{\"error\": \"?\"}");
    (void)fflush(stdout);
    cJSON_free(t);
    cJSON_Delete(j);
}

static void print_error(const char *what)
{
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "error", what);
    print_json(j);
}

/* The corpus's valid strings (the first limit, 0: all). */
static char **corpus_load(const char *path, int limit, int *n_p)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = weft_malloc(1 << 22);
    size_t len = buf ? fread(buf, 1, (1 << 22) - 1, f) : 0;
    (void)fclose(f); /* read only */
    if (!buf)
        return NULL;
    buf[len] = '\0';
    cJSON *j = cJSON_Parse(buf);
    weft_free(buf);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "valid");
    int n = cJSON_GetArraySize(v);
    if (limit > 0 && n > limit)
        n = limit;
    char **out = n > 0 ? weft_calloc((size_t)n, sizeof(*out)) : NULL;
    for (int i = 0; out && i < n; i++) {
        const cJSON *s = cJSON_GetArrayItem(v, i);
        out[i] = cJSON_IsString(s) ? weft_strdup(s->valuestring) : NULL;
        if (!out[i]) {
            while (i-- > 0)
                weft_free(out[i]);
            weft_free((void *)out);
            out = NULL;
        }
    }
    cJSON_Delete(j);
    if (out)
        *n_p = n;
    return out;
}

/* Tokenizer rounds: each "run" line encodes every prompt once, one call each. */
static int run_tokenizer(bool clip, int limit)
{
    char dir[2048], corpus[2048];
    snprintf(dir, sizeof(dir), "%s/%s", WEFT_SOURCE_ROOT, clip ? CLIP_TOKENIZER : T5_TOKENIZER);
    snprintf(corpus, sizeof(corpus), "%s/%s", WEFT_SOURCE_ROOT, CORPUS);
    struct weft_error err = WEFT_ERROR_INIT;
    struct weft_tokenizer *tok;
    int n = 0;
    char **texts = corpus_load(corpus, limit, &n);
    if (!texts) {
        print_error("cannot read the corpus");
        return 1;
    }
    if (weft_tokenizer_open(dir, clip ? WEFT_TOKENIZER_CLIP : WEFT_TOKENIZER_T5, &tok, &err) !=
        WEFT_OK) {
        print_error(weft_error_text(&err));
        return 1;
    }
    cJSON *ready = cJSON_CreateObject();
    cJSON_AddBoolToObject(ready, "ready", true);
    cJSON_AddNumberToObject(ready, "prompts", n);
    cJSON_AddStringToObject(ready, "about", clip ? "weft's CLIP BPE" : "weft's T5 unigram");
    print_json(ready);
    const int64_t max_len = clip ? 77 : 512;
    int rc = 0;
    char line[64];
    while (rc == 0 && fgets(line, sizeof(line), stdin) && strncmp(line, "run", 3) == 0) {
        const double s = weft_now();
        int64_t ids = 0;
        for (int i = 0; i < n && rc == 0; i++) {
            struct weft_tokens t;
            if (weft_tokenizer_encode(tok, texts[i], strlen(texts[i]), max_len, "prompt", &t,
                                      &err) != WEFT_OK) {
                print_error(weft_error_text(&err));
                rc = 1;
                break;
            }
            ids += t.len;
            weft_tokens_cleanup(&t);
        }
        if (rc == 0)
            printf("{\"ms\": %.3f, \"ids\": %lld}\n", (weft_now() - s) * 1e3, (long long)ids);
        (void)fflush(stdout);
    }
    weft_tokenizer_close(tok);
    for (int i = 0; i < n; i++)
        weft_free(texts[i]);
    weft_free((void *)texts);
    return rc;
}

struct enc_run {
    const char *what, *model, *rdv;
    int64_t tokens;
    int tp, rank;
    bool once;
};

/* One encoder: loaded once, then one timed forward per "run" line; --once: one forward at
 * rank of tp (over weft's transport when tp > 1), then the figures and the end. */
static int run_encoder(struct weft_cli *cli, const struct enc_run *r)
{
    const bool clip = strcmp(r->what, "clip") == 0;
    const struct weft_kernels *K;
    struct weft_kctx *kc;
    if (weft_kernels_cpu_create((int)cli->conf.kernels.threads, &K, &kc) != WEFT_OK)
        return 1;
    const enum weft_dtype dt = (enum weft_dtype)cli->conf.model.dtype; /* --model.dtype */
    (void)K->set_compute(kc, dt);
    struct weft_error err = WEFT_ERROR_INIT;
    struct weft_text_opts o = {.kernels = K, .kctx = kc, .dtype = dt};
    struct weft_transport *tp = NULL;
    struct weft_par_transport *pt = NULL;
    struct weft_tp_layout *lay = NULL;
    weft_status_t st = WEFT_OK;
    if (!clip && r->tp > 1) {
        struct weft_transport_opts to;
        weft_transport_opts_from_conf(&cli->conf.transport, &to);
        const struct weft_mesh mesh = {1, 1, 1, r->tp};
        struct weft_ckpt *ck = NULL;
        struct weft_t5_config c;
        st = weft_transport_create(&to, r->rank, r->tp, r->rdv, &tp, &err);
        if (st == WEFT_OK)
            st = weft_par_transport_create(tp, &mesh, 0, &pt, &err);
        if (st == WEFT_OK)
            st = weft_ckpt_open(r->model, &ck, &err);
        if (st == WEFT_OK)
            st = weft_t5_config_parse(weft_ckpt_config(ck), r->model, &c, &err);
        if (st == WEFT_OK)
            st = weft_t5_tp_resolve(&c, ck, r->tp, &lay, &err);
        weft_ckpt_close(ck);
        o.tp_rank = r->rank, o.tp_size = r->tp, o.tp_layout = lay;
        o.comm = pt ? weft_par_transport_comm(pt) : NULL;
    }
    const double t0 = weft_now();
    struct weft_clip_text *cm = NULL;
    struct weft_t5 *tm = NULL;
    if (st == WEFT_OK)
        st = clip ? weft_clip_text_load(r->model, &o, &cm, &err)
                  : weft_t5_load(r->model, &o, &tm, &err);
    if (st != WEFT_OK) {
        print_error(weft_error_text(&err));
        return 1;
    }
    const double load_s = weft_now() - t0;
    const int64_t vocab = clip ? weft_clip_text_get_config(cm)->vocab_size
                               : weft_t5_get_config(tm)->vocab_size;
    const int64_t width = clip ? weft_clip_text_get_config(cm)->hidden_size
                               : weft_t5_get_config(tm)->d_model;
    const size_t bytes = clip ? weft_clip_text_weight_bytes(cm) : weft_t5_weight_bytes(tm);
    int32_t *ids = weft_malloc((size_t)r->tokens * sizeof(*ids));
    float *out = weft_malloc((size_t)(r->tokens * width) * sizeof(float));
    float *pooled = weft_malloc((size_t)width * sizeof(float));
    int rc = ids && out && pooled ? 0 : 1;
    if (rc == 0)
        bench_ids(clip, vocab, r->tokens, ids);
    char what[256];
    K->describe(kc, what, sizeof(what));
    cJSON *ready = cJSON_CreateObject();
    cJSON_AddBoolToObject(ready, "ready", true);
    cJSON_AddNumberToObject(ready, "load_s", load_s);
    cJSON_AddNumberToObject(ready, "threads", weft_kernels_cpu_threads(kc));
    cJSON_AddNumberToObject(ready, "weight_bytes", (double)bytes);
    cJSON_AddStringToObject(ready, "about", what);
    if (!r->once) {
        print_json(ready); /* and deletes it */
        ready = NULL;
    }
    char line[64];
    while (rc == 0 && (r->once || (fgets(line, sizeof(line), stdin) &&
                                   strncmp(line, "run", 3) == 0))) {
        const double s = weft_now();
        st = clip ? weft_clip_text_forward(cm, ids, r->tokens, NULL, pooled, &err)
                  : weft_t5_forward(tm, ids, r->tokens, out, &err);
        if (st != WEFT_OK) {
            print_error(weft_error_text(&err));
            rc = 1;
            break;
        }
        /* a checksum of the output, to compare the sides by eye */
        const float *y = clip ? pooled : out;
        double sum = 0;
        for (int64_t i = 0; i < (clip ? width : r->tokens * width); i++)
            sum += fabs((double)y[i]);
        if (r->once) {
            cJSON_AddNumberToObject(ready, "ms", (weft_now() - s) * 1e3);
            print_json(ready);
            ready = NULL;
            break;
        }
        printf("{\"ms\": %.3f, \"abs_sum\": %.6g}\n", (weft_now() - s) * 1e3, sum);
        (void)fflush(stdout);
    }
    cJSON_Delete(ready);
    weft_free(ids), weft_free(out), weft_free(pooled);
    weft_clip_text_destroy(cm);
    weft_t5_destroy(tm);
    weft_tp_layout_destroy(lay);
    weft_par_transport_destroy(pt);
    weft_transport_destroy(tp);
    weft_kernels_cpu_destroy(kc);
    return rc;
}

/* bench text-run --what clip|t5|tok-clip|tok-t5 [--model DIR] [--tokens N] [--limit N]
 *                [--tp T --rank R --rdv HOST:PORT --once] */
int weft_bench_text_run(struct weft_cli *cli)
{
    struct enc_run r = {NULL, NULL, "-", 77, 1, 0, false};
    long long tokens = 77, tp = 1, rank = 0, limit = 0;
    for (int i = 1; i < cli->argc; i++) {
        const char *v;
        if (strcmp(cli->argv[i], "--once") == 0)
            r.once = true;
        else if ((v = weft_cli_opt_value(cli->argc, cli->argv, &i, "--what")))
            r.what = v;
        else if ((v = weft_cli_opt_value(cli->argc, cli->argv, &i, "--model")))
            r.model = v;
        else if ((v = weft_cli_opt_value(cli->argc, cli->argv, &i, "--rdv")))
            r.rdv = v;
        else if ((v = weft_cli_opt_value(cli->argc, cli->argv, &i, "--tokens")))
            tokens = strtoll(v, NULL, 10);
        else if ((v = weft_cli_opt_value(cli->argc, cli->argv, &i, "--tp")))
            tp = strtoll(v, NULL, 10);
        else if ((v = weft_cli_opt_value(cli->argc, cli->argv, &i, "--rank")))
            rank = strtoll(v, NULL, 10);
        else if ((v = weft_cli_opt_value(cli->argc, cli->argv, &i, "--limit")))
            limit = strtoll(v, NULL, 10);
        else
            return 2;
    }
    if (!r.what || tokens < 1 || tokens > 4096 || tp < 1 || tp > 64 || rank < 0 || rank >= tp ||
        limit < 0)
        return 2;
    if (strncmp(r.what, "tok-", 4) == 0)
        return run_tokenizer(strcmp(r.what, "tok-clip") == 0, (int)limit);
    if (!r.model || (strcmp(r.what, "clip") != 0 && strcmp(r.what, "t5") != 0))
        return 2;
    r.tokens = tokens, r.tp = (int)tp, r.rank = (int)rank;
    return run_encoder(cli, &r);
}

/* ---------------------------------------------------------------------------------------- */
/* The orchestrator                                                                          */

#define READY_TIMEOUT_S 1800.0
#define RUN_TIMEOUT_S 1800.0

struct side {
    const char *impl, *what; /* "weft" / "transformers+torch"; "clip", "t5", "tok-clip", ... */
    char about[256];
    struct weft_child ch;
    bool alive, tried;
    int threads, prompts;
    double load_s, abs_sum; /* the output's sum of |x| (encoders), the last round's */
    long maxrss_kib;
    struct weft_bench_series ms;
};

static void side_start(struct side *sd, char *const argv[])
{
    sd->tried = true;
    if (weft_child_start_duplex(argv, NULL, &sd->ch) != 0)
        return;
    cJSON *j = weft_child_ask_json(&sd->ch, NULL, READY_TIMEOUT_S);
    if (j && cJSON_IsTrue(cJSON_GetObjectItem(j, "ready"))) {
        sd->alive = true;
        const cJSON *ab = cJSON_GetObjectItem(j, "about"), *th = cJSON_GetObjectItem(j, "threads");
        const cJSON *ls = cJSON_GetObjectItem(j, "load_s"), *np = cJSON_GetObjectItem(j, "prompts");
        if (cJSON_IsString(ab))
            snprintf(sd->about, sizeof(sd->about), "%s", ab->valuestring);
        sd->threads = cJSON_IsNumber(th) ? th->valueint : 0;
        sd->load_s = cJSON_IsNumber(ls) ? ls->valuedouble : -1;
        sd->prompts = cJSON_IsNumber(np) ? np->valueint : 0;
    } else {
        kill(sd->ch.pid, SIGKILL);
    }
    cJSON_Delete(j);
}

static void side_round(struct side *sd, int round)
{
    if (!sd->alive)
        return;
    weft_child_settle();
    cJSON *j = weft_child_ask_json(&sd->ch, "run", RUN_TIMEOUT_S);
    const cJSON *ms = j ? cJSON_GetObjectItem(j, "ms") : NULL;
    const cJSON *sum = j ? cJSON_GetObjectItem(j, "abs_sum") : NULL;
    if (ms && cJSON_IsNumber(ms)) {
        weft_bench_series_set(&sd->ms, round, ms->valuedouble);
        sd->abs_sum = sum && cJSON_IsNumber(sum) ? sum->valuedouble : NAN;
    } else {
        WEFT_LOG_ERROR("bench", "%s %s: the run failed", sd->impl, sd->what);
        kill(sd->ch.pid, SIGKILL);
        sd->alive = false;
    }
    cJSON_Delete(j);
}

/* T5 at tp ranks, each its own process: the peak RSS and held bytes of every rank. */
struct rank_mem {
    int tp;
    bool ok;
    double rss[2], weight_bytes[2], ms;
};

static void t5_per_rank(const char *self, const char *thr, const char *dts, const char *model,
                        const char *tokens, struct rank_mem *m)
{
    struct weft_rdv_server *srv = NULL;
    char where[64] = "-";
    m->ok = false;
    if (m->tp > 1) {
        if (weft_rdv_server_create("127.0.0.1", 0, m->tp, &srv, NULL) != WEFT_OK)
            return;
        snprintf(where, sizeof(where), "127.0.0.1:%u", (unsigned)weft_rdv_server_port(srv));
    }
    struct weft_child ch[2];
    char tps[8], rks[2][8];
    snprintf(tps, sizeof(tps), "%d", m->tp);
    int started = 0;
    for (int r = 0; r < m->tp; r++) {
        snprintf(rks[r], sizeof(rks[r]), "%d", r);
        char *argv[] = {(char *)self, (char *)thr, (char *)dts, "bench", "text-run", "--what",
                        "t5", "--model", (char *)model, "--tokens", (char *)tokens, "--tp",
                        tps, "--rank", rks[r], "--rdv", where, "--once", NULL};
        if (weft_child_start(argv, NULL, &ch[r]) != 0)
            break;
        started++;
    }
    const double deadline = weft_now() + 600;
    while (srv && weft_rdv_server_progress(srv, 100) == WEFT_INPROGRESS && weft_now() < deadline)
        ;
    weft_rdv_server_destroy(srv);
    bool ok = started == m->tp;
    for (int r = 0; r < started; r++) {
        char out[4096];
        long kib = 0;
        ok &= weft_child_finish(&ch[r], out, sizeof(out), &kib) == 0;
        cJSON *j = cJSON_Parse(out);
        const cJSON *wb = j ? cJSON_GetObjectItem(j, "weight_bytes") : NULL;
        const cJSON *ms = j ? cJSON_GetObjectItem(j, "ms") : NULL;
        ok &= wb && ms && cJSON_IsNumber(wb) && cJSON_IsNumber(ms);
        m->rss[r] = (double)kib * 1024.0;
        m->weight_bytes[r] = wb && cJSON_IsNumber(wb) ? wb->valuedouble : NAN;
        if (r == 0 && ms && cJSON_IsNumber(ms))
            m->ms = ms->valuedouble;
        cJSON_Delete(j);
    }
    m->ok = ok;
    if (!ok)
        WEFT_LOG_ERROR("bench", "T5 at tp %d: a rank failed", m->tp);
}

/* rows: clip weft, clip torch, t5 weft, t5 torch, tok-clip weft, tok-clip torch, tok-t5 ... */
#define N_SIDES 8

static const char *const row_names[4] = {"CLIP-L text (77 tokens)", "T5-XXL encoder",
                                         "CLIP BPE tokenizer", "T5 unigram tokenizer"};

static double side_rate(const struct side *sd, double ms)
{
    return sd->prompts > 0 ? (double)sd->prompts / (ms / 1e3) : NAN;
}

/* A tokenizer's ms per pass as prompts per second, round by round. */
static void rates_of(const struct side *sd, struct weft_bench_series *out)
{
    *out = (struct weft_bench_series){0};
    for (int r = 0; r < sd->ms.n; r++)
        weft_bench_series_set(out, r, side_rate(sd, sd->ms.v[r]));
}

static void report_json(const struct text_bench_opts *o, const struct side *sd,
                        const struct rank_mem *mem, int threads)
{
    cJSON *root = weft_bench_json_context(&o->b);
    cJSON *cfg = cJSON_AddObjectToObject(root, "config");
    cJSON_AddStringToObject(cfg, "dtype", weft_dtype_name(o->dtype));
    cJSON_AddStringToObject(cfg, "weights", "bf16");
    cJSON_AddNumberToObject(cfg, "layers", (double)o->layers);
    cJSON_AddNumberToObject(cfg, "t5_tokens", (double)o->t5_tokens);
    cJSON_AddNumberToObject(cfg, "threads", threads);
    cJSON *rows = cJSON_AddArrayToObject(root, "rows");
    for (int i = 0; i < N_SIDES; i++) {
        const struct side *s = &sd[i], *torch = &sd[i | 1];
        const bool tok = strncmp(s->what, "tok-", 4) == 0;
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "what", s->what);
        cJSON_AddStringToObject(e, "impl", s->impl);
        cJSON_AddStringToObject(e, "about", s->about);
        cJSON_AddItemToObject(e, "ms", weft_bench_json_fig(&s->ms, 1.0));
        if (tok) {
            struct weft_bench_series rate;
            rates_of(s, &rate);
            cJSON_AddItemToObject(e, "prompts_per_s", weft_bench_json_fig(&rate, 1.0));
            cJSON_AddNumberToObject(e, "prompts", s->prompts);
        }
        cJSON_AddNumberToObject(e, "peak_rss_bytes", (double)s->maxrss_kib * 1024.0);
        if (!tok && s->ms.n)
            cJSON_AddNumberToObject(e, "abs_sum", s->abs_sum);
        struct weft_bench_cmp c;
        weft_bench_compare(&s->ms, &torch->ms, &c);
        cJSON_AddItemToObject(e, "ratio_vs_torch",
                              i % 2 == 0 && torch->ms.n
                                  ? weft_bench_json_cmp(&c, "torch faster", "weft faster")
                                  : cJSON_CreateNull());
        cJSON_AddItemToArray(rows, e);
    }
    cJSON *pr = cJSON_AddArrayToObject(root, "t5_per_rank");
    for (int k = 0; k < 2; k++) {
        for (int r = 0; r < mem[k].tp; r++) {
            cJSON *e = cJSON_CreateObject();
            cJSON_AddNumberToObject(e, "tp", mem[k].tp);
            cJSON_AddNumberToObject(e, "rank", r);
            cJSON_AddBoolToObject(e, "ok", mem[k].ok);
            cJSON_AddNumberToObject(e, "peak_rss_bytes", mem[k].ok ? mem[k].rss[r] : -1);
            cJSON_AddNumberToObject(e, "weight_bytes", mem[k].ok ? mem[k].weight_bytes[r] : -1);
            cJSON_AddNumberToObject(e, "forward_ms", mem[k].ok ? mem[k].ms : -1);
            cJSON_AddItemToArray(pr, e);
        }
    }
    weft_bench_json_print(root);
}

static void report_table(const struct text_bench_opts *o, const struct side *sd,
                         const struct rank_mem *mem, int threads)
{
    weft_bench_print_context(&o->b, stdout);
    printf("Text encoders, bf16 weights computing in %s, %lld layers each, T5 on %lld tokens, "
           "%d threads\n", weft_dtype_name(o->dtype), o->layers, o->t5_tokens, threads);
    printf("%-26s %-20s %-28s %-10s %-24s %s\n", "what", "impl", "ms / forward", "peak RSS",
           "weft / torch (paired)", "verdict");
    for (int i = 0; i < N_SIDES; i++) {
        if (i == 4)
            printf("\nTokenizers on %d prompts of %s, one prompt per call (CLIP at 77 tokens, "
                   "T5 at 512)\n%-26s %-20s %-28s %-10s %-24s %s\n", sd[i].prompts, CORPUS,
                   "what", "impl", "prompts / s", "peak RSS", "weft / torch time (paired)",
                   "verdict");
        const struct side *s = &sd[i], *torch = &sd[i | 1];
        char f[96] = "n/a", r[64] = "-", rss[32] = "-";
        const char *verdict = "";
        if (s->ms.n && i < 4) {
            weft_bench_fmt(&s->ms, 1.0, 1, f, sizeof(f));
        } else if (s->ms.n) {
            struct weft_bench_series rate;
            rates_of(s, &rate);
            weft_bench_fmt(&rate, 1.0, 0, f, sizeof(f));
        }
        if (s->maxrss_kib > 0)
            snprintf(rss, sizeof(rss), "%.2f GB", (double)s->maxrss_kib * 1024.0 / 1e9);
        if (i % 2 == 0 && s->ms.n && torch->ms.n) {
            struct weft_bench_cmp c;
            weft_bench_compare(&s->ms, &torch->ms, &c);
            weft_bench_fmt_cmp(&c, 2, r, sizeof(r));
            verdict = weft_bench_verdict_str(&c, "torch faster", "weft faster");
        }
        printf("%-26s %-20s %-28s %-10s %-24s %s\n", i % 2 ? "" : row_names[i / 2], s->impl, f,
               rss, r, verdict);
    }
    printf("\nT5-XXL-shaped encoder per rank (one process per rank, load + one forward)\n");
    printf("%-4s %-5s %-12s %-16s %s\n", "tp", "rank", "peak RSS", "weights held", "forward ms");
    for (int k = 0; k < 2; k++)
        for (int r = 0; r < mem[k].tp; r++) {
            if (!mem[k].ok) {
                printf("%-4d %-5d failed\n", mem[k].tp, r);
                continue;
            }
            char rss[32], held[32];
            snprintf(rss, sizeof(rss), "%.2f GB", mem[k].rss[r] / 1e9);
            snprintf(held, sizeof(held), "%.2f GB", mem[k].weight_bytes[r] / 1e9);
            printf("%-4d %-5d %-12s %-16s %.1f\n", mem[k].tp, r, rss, held, mem[k].ms);
        }
    for (int i = 0; i < 4; i += 2)
        if (sd[i].ms.n && sd[i + 1].ms.n)
            printf("(%s output, sum of |x|: weft %.6g, torch %.6g; a check that both sides "
                   "run the same model)\n", sd[i].what, sd[i].abs_sum, sd[i + 1].abs_sum);
    for (int i = 0; i < N_SIDES; i += 2)
        if (sd[i].about[0] && (i == 0 || i == 4 || i == 6))
            printf("(weft %s: %s)\n", sd[i].what, sd[i].about);
    if (sd[1].about[0])
        printf("(torch: %s)\n", sd[1].about);
    if (!o->no_torch && !sd[1].alive)
        printf("(no torch rows: %s could not run transformers)\n", o->python);
}

int weft_bench_text(struct weft_cli *cli)
{
    static struct text_bench_opts o;
    int rc = parse(cli, &o);
    if (rc)
        return rc > 0 ? 0 : 2;
    if (weft_bench_begin(&o.b) != 0)
        return 2;
    char dir[] = "/tmp/weft_bench_text_XXXXXX";
    if (!mkdtemp(dir)) {
        WEFT_LOG_ERROR("bench", "cannot create a temporary folder: %s", strerror(errno));
        return 1;
    }
    const bool q = o.b.quick;
    struct weft_clip_text_config cc = {.vocab_size = 49408, .hidden_size = q ? 64 : 768,
                                       .intermediate_size = q ? 256 : 3072,
                                       .num_hidden_layers = o.layers,
                                       .num_attention_heads = q ? 4 : 12,
                                       .max_position_embeddings = 77, .eos_token_id = 2,
                                       .layer_norm_eps = 1e-5};
    struct weft_t5_config tc = {.vocab_size = 32128, .d_model = q ? 64 : 4096,
                                .d_kv = q ? 16 : 64, .d_ff = q ? 160 : 10240,
                                .num_layers = o.layers, .num_heads = q ? 4 : 64,
                                .num_buckets = 32, .max_distance = 128,
                                .layer_norm_epsilon = 1e-6};
    cc.head_dim = cc.hidden_size / cc.num_attention_heads;
    tc.inner = tc.num_heads * tc.d_kv;
    char clip_dir[128], t5_dir[128], self[4096];
    snprintf(clip_dir, sizeof(clip_dir), "%s/text_encoder", dir);
    snprintf(t5_dir, sizeof(t5_dir), "%s/text_encoder_2", dir);
    WEFT_LOG_INFO("bench", "writing synthetic bf16 CLIP and T5 encoders to %s", dir);
    if (weft_synth_clip_text_write(clip_dir, &cc, WEFT_DTYPE_BF16, 1) != WEFT_OK ||
        weft_synth_t5_write(t5_dir, &tc, WEFT_DTYPE_BF16, 2) != WEFT_OK ||
        weft_self_path(self, sizeof(self)) != 0) {
        weft_remove_tree(dir);
        return 1;
    }
    char thr[64], dts[32], t5tok[16], limit[16], tstr[16], script[2048];
    snprintf(thr, sizeof(thr), "--kernels.threads=%lld", (long long)cli->conf.kernels.threads);
    snprintf(dts, sizeof(dts), "--model.dtype=%s", weft_dtype_name(o.dtype));
    snprintf(t5tok, sizeof(t5tok), "%lld", o.t5_tokens);
    snprintf(limit, sizeof(limit), "%d", q ? QUICK_PROMPTS : 0);
    snprintf(script, sizeof(script), "%s/bench/text_torch.py", WEFT_SOURCE_ROOT);
    static struct side sd[N_SIDES];
    static const char *const whats[4] = {"clip", "t5", "tok-clip", "tok-t5"};
    for (int i = 0; i < N_SIDES; i++)
        sd[i] = (struct side){.impl = i % 2 ? "transformers+torch" : "weft", .what = whats[i / 2]};
    int threads = 0;
    for (int k = 0; k < 4; k++) {
        const char *model = k == 0 ? clip_dir : k == 1 ? t5_dir : "-";
        const char *tokens = k == 1 ? t5tok : "77";
        char *argv[] = {self, thr, dts, "bench", "text-run", "--what", (char *)whats[k],
                        "--model", (char *)model, "--tokens", (char *)tokens, "--limit", limit,
                        NULL};
        side_start(&sd[(size_t)2 * k], argv);
        if (k == 0)
            threads = sd[0].threads;
        snprintf(tstr, sizeof(tstr), "%d", threads > 0 ? threads : 1);
        char *pargv[] = {(char *)o.python, script, "--what", (char *)whats[k], "--model",
                         (char *)model, "--tokens", (char *)tokens, "--threads", tstr,
                         "--dtype", (char *)weft_dtype_name(o.dtype), "--limit", limit,
                         "--root", WEFT_SOURCE_ROOT, NULL};
        if (!o.no_torch && (k == 0 || sd[1].alive))
            side_start(&sd[(size_t)2 * k + 1], pargv);
    }
    if (!o.no_torch && !sd[1].alive)
        WEFT_LOG_WARN("bench", "%s could not run transformers (torch/transformers missing?): no "
                               "torch rows", o.python);
    for (int r = -o.b.warmup; r < o.b.rounds; r++) { /* every side in turn */
        weft_bench_round_note(&o.b, r);
        for (int i = 0; i < N_SIDES; i++)
            side_round(&sd[i], r);
    }
    weft_bench_end(&o.b);
    for (int i = 0; i < N_SIDES; i++)
        if (sd[i].tried && sd[i].ch.pid > 0)
            (void)weft_child_finish(&sd[i].ch, NULL, 0, &sd[i].maxrss_kib);
    struct rank_mem mem[2] = {{.tp = 1}, {.tp = 2}};
    for (int k = 0; k < 2; k++)
        t5_per_rank(self, thr, dts, t5_dir, t5tok, &mem[k]);
    if (o.b.json)
        report_json(&o, sd, mem, threads);
    else
        report_table(&o, sd, mem, threads);
    weft_remove_tree(dir);
    bool ok = mem[0].ok && mem[1].ok;
    for (int i = 0; i < N_SIDES; i += 2)
        ok &= sd[i].ms.n == o.b.rounds;
    return ok ? 0 : 1;
}
