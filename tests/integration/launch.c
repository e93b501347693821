/* Test launcher: fork, rendezvous, watchdog. */
#include "launch.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "conf/conf.h"
#include "worker/par_transport.h"

extern char **environ;

static char tls_buf[WEFT_CONF_STR];

void launch_opts(struct weft_transport_opts *opts)
{
    struct weft_conf conf;
    weft_conf_defaults(&conf);
    if (weft_conf_apply_env(&conf, environ) != WEFT_OK) { /* conf logged which one */
        fprintf(stderr, "launch: bad WEFT_TRANSPORT_* variable\n");
        exit(1);
    }
    snprintf(tls_buf, sizeof(tls_buf), "%s", conf.transport.tls);
    weft_transport_opts_from_conf(&conf.transport, opts);
    opts->tls = tls_buf; /* conf is ours only until we return */
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int launch_start(struct launch *l, int np, launch_child_cb fn, void *arg)
{
    memset(l, 0, sizeof(*l));
    if (np < 1 || np > LAUNCH_MAX) {
        fprintf(stderr, "launch: %d ranks: at most %d\n", np, LAUNCH_MAX);
        return 1;
    }
    struct weft_error err = WEFT_ERROR_INIT;
    if (weft_rdv_server_create("127.0.0.1", 0, np, &l->srv, &err) != WEFT_OK) {
        fprintf(stderr, "launch: rendezvous: %s\n", weft_error_text(&err));
        return 1;
    }
    char where[64];
    snprintf(where, sizeof(where), "127.0.0.1:%u", (unsigned)weft_rdv_server_port(l->srv));
    (void)fflush(stdout);
    (void)fflush(stderr);
    l->np = np;
    l->rdv = WEFT_INPROGRESS;
    for (int r = 0; r < np; r++) {
        l->pids[r] = fork();
        if (l->pids[r] == 0) {
            close(weft_rdv_server_fd(l->srv));
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            weft_log_set_rank(r);
            exit(fn(r, np, where, arg));
        }
        l->status[r] = -1;
        if (l->pids[r] < 0) {
            perror("fork");
            for (int k = 0; k < r; k++) {
                kill(l->pids[k], SIGKILL);
                waitpid(l->pids[k], NULL, 0);
            }
            weft_rdv_server_destroy(l->srv);
            l->srv = NULL;
            return 1;
        }
        l->left++;
    }
    return 0;
}

void launch_poll(struct launch *l, int ms)
{
    if (l->rdv == WEFT_INPROGRESS && l->srv)
        l->rdv = weft_rdv_server_progress(l->srv, ms);
    else
        usleep((useconds_t)ms * 1000);
    for (int r = 0; r < l->np; r++) {
        if (l->status[r] != -1)
            continue;
        int ws;
        if (waitpid(l->pids[r], &ws, WNOHANG) == l->pids[r]) {
            l->status[r] = ws;
            l->left--;
        }
    }
}

int launch_finish(struct launch *l, int timeout_s, int killed_rank)
{
    double deadline = now_s() + timeout_s;
    int fail = 0;
    while (l->left > 0 && now_s() < deadline) {
        launch_poll(l, l->rdv == WEFT_INPROGRESS ? 10 : 2);
        /* the victim may be stopped, not dead: once the others are done, finish it */
        if (killed_rank >= 0 && killed_rank < l->np && l->left == 1 &&
            l->status[killed_rank] == -1)
            kill(l->pids[killed_rank], SIGKILL);
    }
    weft_rdv_server_destroy(l->srv);
    l->srv = NULL;
    /* every rank skipped (exit 77: no GPU for a GPU run, say): the whole test is skipped */
    int skipped = 0;
    for (int r = 0; r < l->np; r++)
        skipped += l->status[r] != -1 && WIFEXITED(l->status[r]) &&
                   WEXITSTATUS(l->status[r]) == 77;
    if (skipped == l->np && killed_rank < 0)
        return 77;
    for (int r = 0; r < l->np; r++) {
        if (l->status[r] == -1) {
            fprintf(stderr, "launch: rank %d still running after %d s: killed (hang)\n", r,
                    timeout_s);
            kill(l->pids[r], SIGKILL);
            waitpid(l->pids[r], &l->status[r], 0);
            fail = 1;
            continue;
        }
        int ws = l->status[r];
        if (r == killed_rank) {
            if (!(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL)) {
                fprintf(stderr, "launch: rank %d should have died of SIGKILL (status %#x)\n", r,
                        ws);
                fail = 1;
            }
        } else if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0) {
            if (WIFSIGNALED(ws))
                fprintf(stderr, "launch: rank %d died of signal %d\n", r, WTERMSIG(ws));
            else
                fprintf(stderr, "launch: rank %d exited with %d\n", r, WEXITSTATUS(ws));
            fail = 1;
        }
    }
    return fail;
}

struct rank_args {
    const struct weft_transport_opts *opts;
    launch_rank_cb fn;
    void *arg;
};

static int rank_main(int rank, int np, const char *where, void *arg)
{
    const struct rank_args *ra = arg;
    struct weft_transport *tp;
    struct weft_error err = WEFT_ERROR_INIT;
    weft_status_t st = weft_transport_create(ra->opts, rank, np, where, &tp, &err);
    if (st != WEFT_OK) {
        fprintf(stderr, "rank %d: transport: %s: %s\n", rank, weft_status_str(st),
                weft_error_text(&err));
        return 2;
    }
    int rc = ra->fn(tp, ra->arg);
    weft_transport_destroy(tp);
    return rc;
}

int launch_run(int np, const struct weft_transport_opts *opts, launch_rank_cb fn, void *arg,
               int timeout_s, int killed_rank)
{
    struct rank_args ra = {opts, fn, arg};
    struct launch l;
    if (launch_start(&l, np, rank_main, &ra) != 0)
        return 1;
    return launch_finish(&l, timeout_s, killed_rank);
}
