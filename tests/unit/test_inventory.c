/* The worker's inventory (worker/inventory.h): the GPUs as the CUDA runtime reports them; the
 * NICs: on this host the array exists, every entry
 * has a name and a type, loopback is left out and RDMA entries (if any) are well formed. Then,
 * when this process may have a network namespace of its own (root or CAP_SYS_ADMIN, `ip`
 * installed), in a fresh one: lo up, a dummy interface with an IPv4 (and IPv6 when the namespace
 * allows it) address and MTU 1400 appears with exactly those, lo still does not. The namespace
 * vanishes with the process; nothing on the host is touched. And the cgroup memory limit read
 * from v2 and v1 files in a temporary folder (limits, "max", v1's "no limit", garbage). */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cJSON.h>

#include "kernels/kernels.h"
#include "test.h"
#include "worker/inventory.h"

extern char **environ;

static const cJSON *nics_of(cJSON *obj)
{
    CHECK_OK(weft_inventory_nics_add(obj));
    const cJSON *nics = cJSON_GetObjectItemCaseSensitive(obj, "nics");
    CHECK(cJSON_IsArray(nics));
    return nics;
}

static bool has_string(const cJSON *arr, const char *s)
{
    const cJSON *e;
    cJSON_ArrayForEach(e, arr)
    {
        if (cJSON_IsString(e) && strcmp(e->valuestring, s) == 0)
            return true;
    }
    return false;
}

static const cJSON *find(const cJSON *nics, const char *name)
{
    const cJSON *e;
    cJSON_ArrayForEach(e, nics)
    {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(e, "name");
        if (strcmp(n->valuestring, name) == 0)
            return e;
    }
    return NULL;
}

/* Every entry: a name, a known type and the fields of that type. */
static void check_entries(const cJSON *nics)
{
    const cJSON *e;
    CHECK(cJSON_GetArraySize(nics) <= WEFT_INVENTORY_NICS_MAX);
    cJSON_ArrayForEach(e, nics)
    {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "name");
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(e, "type");
        CHECK(cJSON_IsString(name) && name->valuestring[0]);
        CHECK(cJSON_IsString(type));
        CHECK(strcmp(name->valuestring, "lo") != 0);
        const cJSON *numa = cJSON_GetObjectItemCaseSensitive(e, "numa_node");
        CHECK(!numa || (cJSON_IsNumber(numa) && numa->valuedouble >= 0));
        if (strcmp(type->valuestring, "rdma") == 0) {
            const cJSON *ports = cJSON_GetObjectItemCaseSensitive(e, "ports"), *p;
            CHECK(cJSON_IsArray(ports));
            cJSON_ArrayForEach(p, ports)
            {
                CHECK(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(p, "port")));
                CHECK(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(p, "state")));
                CHECK(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(p, "link_layer")));
                CHECK(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(p, "rate_gbps")));
            }
            continue;
        }
        CHECK(strcmp(type->valuestring, "ip") == 0);
        const cJSON *v4 = cJSON_GetObjectItemCaseSensitive(e, "ipv4");
        const cJSON *v6 = cJSON_GetObjectItemCaseSensitive(e, "ipv6");
        CHECK(cJSON_IsArray(v4) && cJSON_IsArray(v6));
        CHECK(cJSON_GetArraySize(v4) + cJSON_GetArraySize(v6) > 0); /* an IP interface */
        CHECK(!has_string(v4, "127.0.0.1") && !has_string(v6, "::1"));
        CHECK(cJSON_IsBool(cJSON_GetObjectItemCaseSensitive(e, "up")));
        const cJSON *mtu = cJSON_GetObjectItemCaseSensitive(e, "mtu");
        CHECK(cJSON_IsNumber(mtu) && mtu->valuedouble >= 68);
        const cJSON *speed = cJSON_GetObjectItemCaseSensitive(e, "speed_mbps");
        CHECK(!speed || (cJSON_IsNumber(speed) && speed->valuedouble > 0));
    }
}

/* Run `ip ARGS...` quietly; its exit status (127 when it cannot be started). */
static int ip(const char *a1, const char *a2, const char *a3, const char *a4, const char *a5,
              const char *a6, const char *a7)
{
    char *argv[] = {"ip",       (char *)a1, (char *)a2, (char *)a3, (char *)a4,
                    (char *)a5, (char *)a6, (char *)a7, NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    pid_t pid;
    int rc = posix_spawnp(&pid, "ip", &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0)
        return 127;
    int status;
    CHECK(waitpid(pid, &status, 0) == pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

static void check_dummy(void)
{
    if (unshare(CLONE_NEWNET) != 0) {
        printf("skipped the dummy interface: no network namespace of our own (%s)\n",
               strerror(errno));
        return;
    }
    /* a dummy, or one end of a veth pair where the kernel has no dummy driver */
    if (ip("link", "add", "weftdummy0", "type", "dummy", NULL, NULL) != 0 &&
        ip("link", "add", "weftdummy0", "type", "veth", "peer", "weftpeer0") != 0) {
        printf("skipped the dummy interface: `ip link add` (dummy, veth) failed or no `ip`\n");
        return;
    }
    CHECK_EQ(ip("link", "set", "lo", "up", NULL, NULL, NULL), 0);
    CHECK_EQ(ip("link", "set", "weftdummy0", "mtu", "1400", "up", NULL), 0);
    CHECK_EQ(ip("addr", "add", "10.231.7.5/24", "dev", "weftdummy0", NULL, NULL), 0);
    bool v6 = ip("-6", "addr", "add", "fd00:231::5/64", "dev", "weftdummy0", "nodad") == 0;
    cJSON *obj = cJSON_CreateObject();
    const cJSON *nics = nics_of(obj);
    check_entries(nics);
    char *text = cJSON_PrintUnformatted(nics);
    printf("in a fresh network namespace: %s\n", text);
    free(text);
    const cJSON *d = find(nics, "weftdummy0");
    CHECK(d);
    CHECK(find(nics, "lo") == NULL);
    CHECK(has_string(cJSON_GetObjectItemCaseSensitive(d, "ipv4"), "10.231.7.5"));
    CHECK(!v6 || has_string(cJSON_GetObjectItemCaseSensitive(d, "ipv6"), "fd00:231::5"));
    CHECK_EQ(cJSON_GetObjectItemCaseSensitive(d, "mtu")->valuedouble, 1400);
    const cJSON *e; /* the dummy is the only IP interface here (RDMA devices are not per netns) */
    cJSON_ArrayForEach(e, nics)
    {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(e, "type");
        CHECK(e == d || strcmp(type->valuestring, "ip") != 0);
    }
    cJSON_Delete(obj);
}

/* The GPUs: one entry per GPU the CUDA runtime reports, each well formed; no "gpus" at all on a
 * machine without one (or a build without CUDA). */
static void check_gpus(void)
{
    cJSON *obj = cJSON_CreateObject();
    CHECK_OK(weft_inventory_gpus_add(obj));
    const cJSON *gpus = cJSON_GetObjectItemCaseSensitive(obj, "gpus");
    const int n = weft_gpu_count();
    if (n == 0) {
        CHECK(gpus == NULL);
        printf("this host: no GPU, no \"gpus\" entry\n");
    } else {
        CHECK(cJSON_IsArray(gpus) && cJSON_GetArraySize(gpus) == n);
        const cJSON *g;
        cJSON_ArrayForEach(g, gpus)
        {
            const char *num[] = {"index", "memory", "sm_count"};
            for (int i = 0; i < 3; i++)
                CHECK(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(g, num[i])));
            CHECK(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(g, "name")));
            CHECK(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(g, "compute_capability")));
            CHECK(cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(g, "peers")));
            CHECK(cJSON_GetObjectItemCaseSensitive(g, "memory")->valuedouble > 0);
        }
        printf("this host: %d GPU entries\n", n);
    }
    cJSON_Delete(obj);
}

static void put(const char *dir, const char *file, const char *text)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, file);
    FILE *f = fopen(path, "w");
    CHECK(f && fputs(text, f) >= 0 && fclose(f) == 0);
}

/* mkdir -p of root/rel */
static void mkdirs(const char *root, const char *rel)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", root, rel);
    for (char *p = path + strlen(root) + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            CHECK(mkdir(path, 0700) == 0 || errno == EEXIST);
            *p = '/';
        }
    CHECK(mkdir(path, 0700) == 0 || errno == EEXIST);
}

/* The cgroup limit on fake trees: a v2 unit under a slice (the least of the levels, "max"
 * none), a v1 hierarchy found by the memory controller's line (among others: "cpu,memory"),
 * v1's "no limit", files that are not numbers, no files. */
static void check_cgroup(void)
{
    char root[] = "/tmp/weft_cgroup_XXXXXX", self[600], dir[600];
    CHECK(mkdtemp(root));
    snprintf(self, sizeof(self), "%s/self", root);
    put(root, "self", "0::/system.slice/weft.service\n");
    CHECK_EQ(weft_inventory_cgroup_memory(root, self), 0); /* no file: no limit */
    mkdirs(root, "system.slice/weft.service");
    snprintf(dir, sizeof(dir), "%s/system.slice", root);
    put(dir, "memory.max", "8589934592\n");
    put(dir, "weft.service/memory.max", "max\n");
    CHECK_EQ(weft_inventory_cgroup_memory(root, self), 8589934592ull); /* the slice's */
    put(dir, "weft.service/memory.max", "4294967296\n");
    CHECK_EQ(weft_inventory_cgroup_memory(root, self), 4294967296ull); /* the unit's, less */
    put(dir, "weft.service/memory.max", "12 GiB\n"); /* not a number: the level is skipped */
    CHECK_EQ(weft_inventory_cgroup_memory(root, self), 8589934592ull);
    put(dir, "memory.max", "max\n");
    CHECK_EQ(weft_inventory_cgroup_memory(root, self), 0);
    /* v1: the memory controller's own path; v2's line has no memory.max under it */
    put(root, "self", "7:pids:/other\n5:cpu,memory:/pod1/c1\n0::/nowhere\n");
    mkdirs(root, "memory/pod1/c1");
    snprintf(dir, sizeof(dir), "%s/memory", root);
    put(dir, "memory.limit_in_bytes", "9223372036854771712\n"); /* v1 without a limit */
    put(dir, "pod1/c1/memory.limit_in_bytes", "9223372036854771712\n");
    CHECK_EQ(weft_inventory_cgroup_memory(root, self), 0);
    put(dir, "pod1/memory.limit_in_bytes", "2147483648\n");
    CHECK_EQ(weft_inventory_cgroup_memory(root, self), 2147483648ull); /* the pod's */
    put(dir, "pod1/c1/memory.limit_in_bytes", "1073741824\n");
    CHECK_EQ(weft_inventory_cgroup_memory(root, self), 1073741824ull);
    char missing[700];
    snprintf(missing, sizeof(missing), "%s/no-such-file", root); /* v1's root only then */
    CHECK_EQ(weft_inventory_cgroup_memory(root, missing), 0);
    printf("this process's cgroup memory limit: %llu (0: none)\n",
           (unsigned long long)weft_inventory_cgroup_memory("/sys/fs/cgroup",
                                                            "/proc/self/cgroup"));
    char cmd[700];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
    CHECK(system(cmd) == 0);
}

int main(void)
{
    check_cgroup();
    check_gpus();
    cJSON *obj = cJSON_CreateObject();
    const cJSON *nics = nics_of(obj);
    check_entries(nics);
    printf("this host: %d NIC entries\n", cJSON_GetArraySize(nics));
    cJSON_Delete(obj);
    check_dummy();
    return 0;
}
