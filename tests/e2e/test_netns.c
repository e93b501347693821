/* Three hosts on one machine: network namespaces n1, n2, n3 joined by veth pairs to a bridge
 * (in a fourth namespace), addresses 10.X.Y.1/2/3. n1 runs `weft serve --runner cluster` on
 * its non-loopback address, n2 and n3 one `weft worker` each with UCX over TCP only, so the
 * coordinator's links and the workers' tensor-parallel collectives cross the veths. One job
 * submitted from n1 through the C client must give the PNG of `weft generate` (pixels within one
 * level); each worker's hello in GET /v1/cluster (and `weft status --json`) lists its veth with
 * its address; n2 holds an established TCP connection to n3.
 *
 * test_netns WEFT_BINARY. Skipped (77) when namespaces cannot be made (not root, no `ip`, no
 * veth or bridge driver). The namespaces are deleted at exit, on a failed check, on SIGTERM and
 * by the watchdog; every wait is bounded and the whole test stops by itself within 100 s. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cJSON.h>

#include "client/weft.h"
#include "test.h"
#include "png_diff.h"

extern char **environ;

enum { N1, N2, N3, NBR, N_NS };

static const char *weft_bin;
static char ip_bin[256];
static char tmp[128];
static char ns[N_NS][32];
static volatile sig_atomic_t n_ns; /* namespaces created so far */
static pid_t children[8];
static volatile sig_atomic_t n_children;
static char addr[3][16]; /* 10.X.Y.1, .2, .3 */
static const char *secret_env = "WEFT_CLUSTER_SECRET=netns-test-secret";
static const char *token = "netns-test-token";

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

/* ---------------------------------------------------------------------------------------- */
/* Cleanup: async-signal-safe, so the watchdog and SIGTERM can run it too                     */

static void kill_all(void)
{
    for (int i = 0; i < n_children; i++)
        if (children[i] > 0)
            kill(children[i], SIGKILL);
    for (int i = 0; i < n_children; i++)
        if (children[i] > 0 && waitpid(children[i], NULL, 0) == children[i])
            children[i] = 0;
}

/* `ip netns del` each namespace made (fork + execv: safe in a signal handler). */
static void delete_namespaces(void)
{
    for (int i = (int)n_ns - 1; i >= 0; i--) {
        pid_t pid = fork();
        if (pid == 0) {
            int fd = open("/dev/null", O_WRONLY);
            if (fd >= 0)
                dup2(fd, 1), dup2(fd, 2);
            char *argv[] = {"ip", "netns", "del", ns[i], NULL};
            execv(ip_bin, argv);
            _exit(127);
        }
        if (pid > 0)
            waitpid(pid, NULL, 0);
    }
    n_ns = 0;
}

static void cleanup(void)
{
    kill_all();
    delete_namespaces();
}

static void on_signal(int sig)
{
    static const char alarm_msg[] = "test_netns: watchdog: not finished in time\n";
    static const char term_msg[] = "test_netns: terminated\n";
    if (sig == SIGALRM)
        (void)!write(2, alarm_msg, sizeof(alarm_msg) - 1);
    else
        (void)!write(2, term_msg, sizeof(term_msg) - 1);
    cleanup();
    static const char kept[] = "test_netns: logs kept in ";
    (void)!write(2, kept, sizeof(kept) - 1);
    (void)!write(2, tmp, strlen(tmp));
    (void)!write(2, "\n", 1);
    _exit(1);
}

/* ---------------------------------------------------------------------------------------- */
/* Processes                                                                                */

/* Run `ip ARGS` to its end (ip is quick); its exit status, its stderr in tmp/ip.err. */
static int ip(const char *const *args)
{
    char *argv[24];
    int n = 0;
    argv[n++] = "ip";
    for (; *args && n < 23; args++)
        argv[n++] = (char *)*args;
    argv[n] = NULL;
    char err[256];
    snprintf(err, sizeof(err), "%s/ip.err", tmp);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid;
    int rc = posix_spawn(&pid, ip_bin, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0)
        return 127;
    int status;
    if (waitpid(pid, &status, 0) != pid)
        return 127;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void ip_error(char *out, size_t len)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/ip.err", tmp);
    out[0] = '\0';
    FILE *f = fopen(path, "r");
    if (f) {
        size_t n = fread(out, 1, len - 1, f);
        out[n] = '\0';
        out[strcspn(out, "\n")] = '\0';
        fclose(f);
    }
}

/* Start `ip netns exec NS weft ARGS` with extra environment entries (NULL-ended); stdout and
 * stderr go to log. ip execs weft, so the pid is weft's. */
static pid_t spawn_in(int which, const char *const *args, const char *const *env_extra,
                      const char *log)
{
    char *argv[40];
    int n = 0;
    argv[n++] = "ip", argv[n++] = "netns", argv[n++] = "exec", argv[n++] = ns[which];
    argv[n++] = (char *)weft_bin;
    for (; *args && n < 39; args++)
        argv[n++] = (char *)*args;
    argv[n] = NULL;
    char *env[512];
    int k = 0;
    for (char **e = environ; *e && k < 500; e++)
        env[k++] = *e;
    for (; env_extra && *env_extra && k < 511; env_extra++)
        env[k++] = (char *)*env_extra;
    env[k] = NULL;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    pid_t pid;
    CHECK(n_children < (int)(sizeof(children) / sizeof(children[0])));
    CHECK(posix_spawn(&pid, ip_bin, &fa, NULL, argv, env) == 0);
    posix_spawn_file_actions_destroy(&fa);
    children[n_children++] = pid;
    return pid;
}

static void forget(pid_t pid)
{
    for (int i = 0; i < n_children; i++)
        if (children[i] == pid)
            children[i] = 0;
}

/* Its exit status, or -1 when it did not end within timeout_ms (then it is killed). */
static int wait_child(pid_t pid, int timeout_ms)
{
    int status = 0;
    double end = now_ms() + timeout_ms;
    pid_t got;
    while ((got = waitpid(pid, &status, WNOHANG)) == 0 && now_ms() < end)
        sleep_ms(20);
    bool late = got == 0;
    if (late) {
        kill(pid, SIGKILL);
        got = waitpid(pid, &status, 0);
    }
    forget(pid);
    CHECK(got == pid);
    if (late)
        return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void show_log(const char *name)
{
    char path[256], line[512];
    snprintf(path, sizeof(path), "%s/%s.log", tmp, name);
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    fprintf(stderr, "--- %s\n", path);
    while (fgets(line, sizeof(line), f))
        fputs(line, stderr);
    fclose(f);
}

/* ---------------------------------------------------------------------------------------- */
/* The network                                                                              */

/* Whether `ip` is on PATH; its full path in ip_bin (execv in a signal handler needs it). */
static bool find_ip(void)
{
    const char *path = getenv("PATH");
    char dirs[1024];
    snprintf(dirs, sizeof(dirs), "%s:/usr/sbin:/sbin:/usr/bin:/bin", path ? path : "");
    for (char *save, *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        snprintf(ip_bin, sizeof(ip_bin), "%s/ip", d);
        if (access(ip_bin, X_OK) == 0)
            return true;
    }
    return false;
}

/* Build the network; false (with the reason printed) when this machine cannot. */
static bool make_network(void)
{
    char why[256];
    pid_t me = getpid();
    static const char *const suffix[N_NS] = {"n1", "n2", "n3", "br"};
    for (int i = 0; i < N_NS; i++) {
        snprintf(ns[i], sizeof(ns[i]), "weft-%d-%s", (int)me, suffix[i]);
        const char *add[] = {"netns", "add", ns[i], NULL};
        if (ip(add) != 0) {
            ip_error(why, sizeof(why));
            printf("cannot create network namespaces (ip netns add: %s)\n", why);
            return false;
        }
        n_ns = i + 1;
    }
    /* 10.X.Y.0/24 from the pid: concurrent runs get different subnets in their logs */
    int x = 1 + (int)((me >> 8) % 250), y = (int)(me & 0xff);
    for (int i = 0; i < 3; i++)
        snprintf(addr[i], sizeof(addr[i]), "10.%d.%d.%d", x, y, i + 1);
    const char *br[][12] = {
        {"-n", ns[NBR], "link", "add", "br0", "type", "bridge", NULL},
        {"-n", ns[NBR], "link", "set", "br0", "up", NULL},
    };
    for (size_t i = 0; i < 2; i++)
        if (ip(br[i]) != 0) {
            ip_error(why, sizeof(why));
            printf("cannot make a bridge (%s)\n", why);
            return false;
        }
    for (int i = 0; i < 3; i++) {
        char port[8], cidr[24];
        snprintf(port, sizeof(port), "vb%d", i + 1);
        snprintf(cidr, sizeof(cidr), "%s/24", addr[i]);
        const char *cmd[][12] = {
            {"-n", ns[NBR], "link", "add", port, "type", "veth", "peer", "name", "weft0", "netns",
             ns[i]},
            {"-n", ns[NBR], "link", "set", port, "master", "br0", "up", NULL},
            {"-n", ns[i], "addr", "add", cidr, "dev", "weft0", NULL},
            {"-n", ns[i], "link", "set", "weft0", "up", NULL},
            {"-n", ns[i], "link", "set", "lo", "up", NULL},
        };
        for (size_t c = 0; c < sizeof(cmd) / sizeof(cmd[0]); c++) {
            const char *argv[13];
            memcpy(argv, cmd[c], sizeof(cmd[c]));
            argv[12] = NULL;
            if (ip(argv) != 0) {
                ip_error(why, sizeof(why));
                printf("cannot connect namespace %s (ip %s %s %s ...: %s)\n", ns[i], argv[2],
                       argv[3], argv[4], why);
                return false;
            }
        }
    }
    return true;
}

/* Move this process into namespace which (for the client and /proc/net). */
static void enter(int which)
{
    char path[128];
    snprintf(path, sizeof(path), "/var/run/netns/%s", ns[which]);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    CHECK(fd >= 0);
    CHECK(setns(fd, CLONE_NEWNET) == 0);
    close(fd);
}

/* The established TCP connections between a and b in this namespace (/proc/self/net/tcp). */
static int tcp_between(const char *a, const char *b)
{
    unsigned ha[4], hb[4];
    CHECK(sscanf(a, "%u.%u.%u.%u", &ha[0], &ha[1], &ha[2], &ha[3]) == 4);
    CHECK(sscanf(b, "%u.%u.%u.%u", &hb[0], &hb[1], &hb[2], &hb[3]) == 4);
    /* the kernel prints the address in memory order as a host-order (little-endian) word */
    unsigned xa = ha[0] | ha[1] << 8 | ha[2] << 16 | ha[3] << 24;
    unsigned xb = hb[0] | hb[1] << 8 | hb[2] << 16 | hb[3] << 24;
    FILE *f = fopen("/proc/self/net/tcp", "r");
    CHECK(f);
    char line[512];
    int n = 0;
    while (fgets(line, sizeof(line), f)) {
        unsigned la, lp, ra, rp, st;
        if (sscanf(line, " %*d: %x:%x %x:%x %x", &la, &lp, &ra, &rp, &st) != 5 || st != 1)
            continue;
        n += (la == xa && ra == xb) || (la == xb && ra == xa);
    }
    fclose(f);
    return n;
}

/* ---------------------------------------------------------------------------------------- */
/* The checks                                                                               */

static void wait_file(const char *path, char *out, size_t len, pid_t server)
{
    for (int i = 0; i < 400; i++) {
        FILE *f = fopen(path, "r");
        if (f) {
            char *got = fgets(out, (int)len, f);
            fclose(f);
            if (got && strchr(out, '\n')) {
                out[strcspn(out, "\n")] = '\0';
                return;
            }
        }
        if (waitpid(server, NULL, WNOHANG) == server) {
            forget(server);
            break;
        }
        sleep_ms(50);
    }
    show_log("serve");
    CHECK(!"the server did not write its port file");
}

static cJSON *cluster_json(struct weft_client *c)
{
    char *text;
    CHECK_OK(weft_client_cluster(c, &text));
    cJSON *j = cJSON_Parse(text);
    weft_client_free(text);
    CHECK(j);
    return j;
}

/* Each worker's hello lists weft0 with its own address: one of n2's, n3's, once each. */
static void check_nics(const cJSON *cluster)
{
    const cJSON *ws = cJSON_GetObjectItemCaseSensitive(cluster, "workers"), *w;
    bool seen[2] = {false, false};
    CHECK_EQ(cJSON_GetArraySize(ws), 2);
    cJSON_ArrayForEach(w, ws)
    {
        const cJSON *nics = cJSON_GetObjectItemCaseSensitive(w, "nics"), *e;
        CHECK(cJSON_IsArray(nics));
        int found = -1;
        cJSON_ArrayForEach(e, nics)
        {
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "name");
            CHECK(cJSON_IsString(name) && strcmp(name->valuestring, "lo") != 0);
            if (strcmp(name->valuestring, "weft0") != 0)
                continue;
            const cJSON *v4 = cJSON_GetObjectItemCaseSensitive(e, "ipv4");
            CHECK(cJSON_GetArraySize(v4) == 1);
            for (int i = 0; i < 2; i++)
                if (strcmp(cJSON_GetArrayItem(v4, 0)->valuestring, addr[1 + i]) == 0)
                    found = i;
        }
        CHECK(found >= 0 && !seen[found]);
        seen[found] = true;
    }
}

static void check_status_cli(const char *api)
{
    char log[256], text[65536];
    snprintf(log, sizeof(log), "%s/status.log", tmp);
    const char *args[] = {"status", "--json", "--server", api, "--token", token, NULL};
    CHECK_EQ(wait_child(spawn_in(N1, args, NULL, log), 20000), 0);
    FILE *f = fopen(log, "r");
    CHECK(f);
    size_t n = fread(text, 1, sizeof(text) - 1, f);
    text[n] = '\0';
    fclose(f);
    CHECK(strstr(text, "\"nics\"") && strstr(text, addr[1]) && strstr(text, addr[2]));
}

static int run(void)
{
    double t0 = now_ms();
    char ref[256], out[256], log[256], pf[256], wf[256], j[300], o[300], tok[128], listen[64];
    snprintf(ref, sizeof(ref), "%s/ref.png", tmp);
    snprintf(out, sizeof(out), "%s/cluster.png", tmp);
    const char *gen[] = {
        "generate",        "--height", "256",    "--width", "256",   "--steps", "3",
        "--prompt-embeds", "red-fox",  "--seed", "7",       "--out", ref,       NULL};
    snprintf(log, sizeof(log), "%s/generate.log", tmp);
    CHECK_EQ(wait_child(spawn_in(N1, gen, NULL, log), 60000), 0);

    snprintf(pf, sizeof(pf), "%s/api", tmp);
    snprintf(wf, sizeof(wf), "%s/workers", tmp);
    snprintf(j, sizeof(j), "--api.journal_dir=%s/journal", tmp);
    snprintf(o, sizeof(o), "--api.output_dir=%s/out", tmp);
    snprintf(tok, sizeof(tok), "--api.token=%s", token);
    snprintf(listen, sizeof(listen), "--cluster.listen=%s:0", addr[0]);
    char api_listen[32];
    snprintf(api_listen, sizeof(api_listen), "%s:0", addr[0]);
    const char *serve[] = {"serve",
                           "--runner",
                           "cluster",
                           "--listen",
                           api_listen,
                           "--port-file",
                           pf,
                           "--worker-port-file",
                           wf,
                           listen,
                           "--parallel.tp_degree=2",
                           "--api.max_attempts=1",
                           j,
                           o,
                           tok,
                           NULL};
    const char *serve_env[] = {secret_env, NULL};
    snprintf(log, sizeof(log), "%s/serve.log", tmp);
    pid_t server = spawn_in(N1, serve, serve_env, log);
    char api[128], workers[128];
    wait_file(pf, api, sizeof(api), server);
    wait_file(wf, workers, sizeof(workers), server);
    CHECK(strncmp(api, addr[0], strlen(addr[0])) == 0);
    CHECK(strncmp(workers, addr[0], strlen(addr[0])) == 0);

    const char *wargs[] = {
        "worker", "--coordinator", workers, "--kernels.threads=1", "--transport.tls=tcp", NULL};
    const char *wenv[] = {secret_env, "UCX_TLS=tcp", NULL};
    pid_t w[2];
    for (int i = 0; i < 2; i++) {
        snprintf(log, sizeof(log), "%s/worker%d.log", tmp, i + 2);
        w[i] = spawn_in(N2 + i, wargs, wenv, log);
    }

    enter(N1);
    struct weft_client_opts co = {.address = api, .token = token, .timeout_ms = 20000};
    struct weft_client *c;
    CHECK_OK(weft_client_connect(&co, &c));
    cJSON *cl = NULL;
    for (int i = 0; i < 600; i++) { /* 30 s */
        cJSON_Delete(cl);
        cl = cluster_json(c);
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cl, "ready")))
            break;
        sleep_ms(50);
    }
    if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cl, "ready"))) {
        show_log("serve"), show_log("worker2"), show_log("worker3");
        CHECK(!"the cluster did not become ready within 30 s");
    }
    check_nics(cl);
    cJSON_Delete(cl);
    check_status_cli(api);

    double tj = now_ms();
    struct weft_prompt p = {.name = "red-fox"};
    struct weft_job_request req = {.prompts = &p,
                                   .n_prompts = 1,
                                   .height = 256,
                                   .width = 256,
                                   .steps = 3,
                                   .count = 1,
                                   .guidance = 3.5,
                                   .seed = 7};
    char id[WEFT_CLIENT_ID_MAX];
    CHECK_OK(weft_client_submit(c, &req, id));
    struct weft_job_status st = {0};
    CHECK_OK(weft_client_wait(c, id, 60000, NULL, NULL, &st));
    if (st.state != WEFT_JOB_DONE) {
        fprintf(stderr, "job %s: %s\n", weft_client_state_name(st.state), st.error);
        show_log("serve"), show_log("worker2"), show_log("worker3");
    }
    CHECK(st.state == WEFT_JOB_DONE && st.n_images == 1);
    weft_job_status_cleanup(&st);
    double job_ms = now_ms() - tj;
    CHECK_OK(weft_client_image_save(c, id, 0, out));
    int d = png_max_diff(ref, out);

    enter(N2); /* the workers' links cross the veths: n2 holds a connection to n3 */
    int conns = tcp_between(addr[1], addr[2]);
    enter(N1);

    weft_client_close(c);
    kill(server, SIGTERM);
    CHECK_EQ(wait_child(server, 20000), 0);
    for (int i = 0; i < 2; i++)
        CHECK_EQ(wait_child(w[i], 20000), 0); /* told to exit by the coordinator */
    printf("namespaces %s (%s, api %s, workers %s), %s (%s), %s (%s), bridge in %s\n", ns[N1],
           addr[0], api, workers, ns[N2], addr[1], ns[N3], addr[2], ns[NBR]);
    printf("tp 2 over veths: job %.0f ms, whole test %.0f ms; %d TCP connection(s) %s <-> %s; "
           "max pixel difference to weft generate %d\n",
           job_ms, now_ms() - t0, conns, addr[1], addr[2], d);
    CHECK(conns >= 1);
    CHECK(d <= 1);
    return 0;
}

int main(int argc, char **argv)
{
    CHECK(argc == 2);
    weft_bin = argv[1];
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!find_ip()) {
        printf("skipped: no `ip` command (iproute2)\n");
        return TEST_SKIP;
    }
    snprintf(tmp, sizeof(tmp), "/tmp/weft_test_netns_XXXXXX");
    CHECK(mkdtemp(tmp));
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    alarm(100);
    atexit(cleanup);
    int rc;
    if (!make_network()) {
        printf("skipped: needs root (or CAP_SYS_ADMIN + CAP_NET_ADMIN), iproute2, veth and "
               "bridge\n");
        rc = TEST_SKIP;
    } else {
        rc = run();
    }
    char cmd[200];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmp);
    return rc;
}
