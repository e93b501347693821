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
    if (weft_conf_apply_env(&conf, environ) != WEFT_OK) {
        fprintf(stderr, "launch: bad WEFT_TRANSPORT_* variable: %s\n", weft_log_last_error());
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

static void rank_main(int rank, int np, const struct weft_transport_opts *opts,
                      const char *where, launch_rank_cb fn, void *arg)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    weft_log_set_rank(rank);
    struct weft_transport *tp;
    weft_status_t st = weft_transport_create(opts, rank, np, where, &tp);
    if (st != WEFT_OK) {
        fprintf(stderr, "rank %d: transport: %s: %s\n", rank, weft_status_str(st),
                weft_log_last_error());
        exit(2);
    }
    int rc = fn(tp, arg);
    weft_transport_destroy(tp);
    exit(rc);
}

int launch_run(int np, const struct weft_transport_opts *opts, launch_rank_cb fn, void *arg,
               int timeout_s, int killed_rank)
{
    struct weft_rdv_server *srv;
    if (weft_rdv_server_create("127.0.0.1", 0, np, &srv) != WEFT_OK) {
        fprintf(stderr, "launch: rendezvous: %s\n", weft_log_last_error());
        return 1;
    }
    char where[64];
    snprintf(where, sizeof(where), "127.0.0.1:%u", (unsigned)weft_rdv_server_port(srv));
    fflush(stdout);
    fflush(stderr);
    pid_t pids[64];
    int status[64];
    int nchild = np < 64 ? np : 64;
    for (int r = 0; r < nchild; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            close(weft_rdv_server_fd(srv));
            rank_main(r, np, opts, where, fn, arg);
        }
        status[r] = -1;
        if (pids[r] < 0) {
            perror("fork");
            for (int k = 0; k < r; k++)
                kill(pids[k], SIGKILL);
            weft_rdv_server_destroy(srv);
            return 1;
        }
    }
    double deadline = now_s() + timeout_s;
    weft_status_t st = WEFT_INPROGRESS;
    int left = nchild, fail = 0;
    while (left > 0 && now_s() < deadline) {
        if (st == WEFT_INPROGRESS)
            st = weft_rdv_server_progress(srv, 10);
        else
            usleep(2000);
        for (int r = 0; r < nchild; r++) {
            if (status[r] != -1)
                continue;
            int ws;
            if (waitpid(pids[r], &ws, WNOHANG) == pids[r]) {
                status[r] = ws;
                left--;
            }
        }
        /* the victim may be stopped, not dead: once the others are done, finish it */
        if (killed_rank >= 0 && killed_rank < nchild && left == 1 && status[killed_rank] == -1)
            kill(pids[killed_rank], SIGKILL);
    }
    weft_rdv_server_destroy(srv);
    for (int r = 0; r < nchild; r++) {
        if (status[r] == -1) {
            fprintf(stderr, "launch: rank %d still running after %d s: killed (hang)\n", r,
                    timeout_s);
            kill(pids[r], SIGKILL);
            waitpid(pids[r], &status[r], 0);
            fail = 1;
            continue;
        }
        int ws = status[r];
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
