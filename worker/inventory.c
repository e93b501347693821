/* The worker's network interfaces for its hello (see inventory.h). */
#include "worker/inventory.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#if WEFT_HAVE_IBVERBS
#include <infiniband/verbs.h>
#endif
#if WEFT_HAVE_HWLOC
#include <hwloc.h>
#endif

#include "common/log.h"
#include "kernels/kernels.h"

/* ---------------------------------------------------------------------------------------- */
/* RDMA devices                                                                             */

#if WEFT_HAVE_IBVERBS
static const char *port_state(enum ibv_port_state s)
{
    switch (s) {
    case IBV_PORT_DOWN:
        return "down";
    case IBV_PORT_INIT:
        return "init";
    case IBV_PORT_ARMED:
        return "armed";
    case IBV_PORT_ACTIVE:
        return "active";
    case IBV_PORT_ACTIVE_DEFER:
        return "active_defer";
    default:
        return "unknown";
    }
}

/* Lanes x Gb/s per lane, as ibv_devinfo and ibstat print them (0: an encoding this libibverbs
 * does not know). */
static double port_rate_gbps(const struct ibv_port_attr *pa)
{
    static const struct {
        uint8_t code, lanes;
    } widths[] = {
        {1, 1}, {2, 4}, {4, 8}, {8, 12}, {16, 2},
    };
    static const struct {
        uint8_t code;
        double gbps;
    } speeds[] = {
        {1, 2.5},     /* SDR */
        {2, 5.0},     /* DDR */
        {4, 10.0},    /* QDR */
        {8, 10.0},    /* FDR10 */
        {16, 14.0},   /* FDR */
        {32, 25.0},   /* EDR */
        {64, 50.0},   /* HDR */
        {128, 100.0}, /* NDR */
    };
    double lanes = 0, lane = 0;
    for (size_t i = 0; i < sizeof(widths) / sizeof(widths[0]); i++)
        if (widths[i].code == pa->active_width)
            lanes = widths[i].lanes;
    for (size_t i = 0; i < sizeof(speeds) / sizeof(speeds[0]); i++)
        if (speeds[i].code == pa->active_speed)
            lane = speeds[i].gbps;
    return lanes * lane;
}

static const char *link_layer(uint8_t ll)
{
    return ll == IBV_LINK_LAYER_INFINIBAND ? "infiniband"
           : ll == IBV_LINK_LAYER_ETHERNET ? "ethernet"
                                           : "unspecified";
}

/* One entry per device; a device that cannot be opened or queried is listed without ports. */
static weft_status_t add_rdma(cJSON *arr, bool *truncated_p)
{
    /* No RDMA device in sysfs: do not load libibverbs' providers at all (they keep device
     * records for the life of the process, which LeakSanitizer reports, and cost time). */
    DIR *dir = opendir("/sys/class/infiniband");
    bool any = false;
    for (struct dirent *e; dir && !any && (e = readdir(dir));)
        any = e->d_name[0] != '.';
    if (dir)
        closedir(dir);
    if (!any)
        return WEFT_OK;
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (!list) /* no RDMA stack on this host: nothing to report */
        return WEFT_OK;
    weft_status_t st = WEFT_OK;
    for (int i = 0; i < n; i++) {
        if (cJSON_GetArraySize(arr) >= WEFT_INVENTORY_NICS_MAX) {
            *truncated_p = true;
            break;
        }
        cJSON *e = cJSON_CreateObject();
        if (!e || !cJSON_AddItemToArray(arr, e)) {
            cJSON_Delete(e);
            st = WEFT_ERR_NOMEM;
            break;
        }
        cJSON_AddStringToObject(e, "name", ibv_get_device_name(list[i]));
        cJSON_AddStringToObject(e, "type", "rdma");
        cJSON *ports = cJSON_AddArrayToObject(e, "ports");
        struct ibv_context *ctx = ibv_open_device(list[i]);
        struct ibv_device_attr da;
        if (!ctx || !ports || ibv_query_device(ctx, &da) != 0) {
            if (ctx)
                ibv_close_device(ctx);
            continue;
        }
        for (int p = 1; p <= da.phys_port_cnt; p++) {
            struct ibv_port_attr pa;
            cJSON *o;
            if (ibv_query_port(ctx, (uint8_t)p, &pa) != 0 || !(o = cJSON_CreateObject()))
                continue;
            cJSON_AddNumberToObject(o, "port", p);
            cJSON_AddStringToObject(o, "state", port_state(pa.state));
            cJSON_AddStringToObject(o, "link_layer", link_layer(pa.link_layer));
            cJSON_AddNumberToObject(o, "rate_gbps", port_rate_gbps(&pa));
            cJSON_AddItemToArray(ports, o);
        }
        ibv_close_device(ctx);
    }
    ibv_free_device_list(list);
    return st;
}
#endif

/* ---------------------------------------------------------------------------------------- */
/* IP interfaces                                                                            */

static bool is_ip(const struct ifaddrs *ifa)
{
    return ifa->ifa_addr && !(ifa->ifa_flags & IFF_LOOPBACK) &&
           (ifa->ifa_addr->sa_family == AF_INET || ifa->ifa_addr->sa_family == AF_INET6);
}

/* An address other hosts can reach beyond the link: IPv4, or IPv6 outside fe80::/10. */
static bool routable(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return true;
    const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;
    return !IN6_IS_ADDR_LINKLOCAL(&s6->sin6_addr);
}

static bool has_routable(const struct ifaddrs *all, const char *name)
{
    for (const struct ifaddrs *ifa = all; ifa; ifa = ifa->ifa_next)
        if (is_ip(ifa) && strcmp(ifa->ifa_name, name) == 0 && routable(ifa->ifa_addr))
            return true;
    return false;
}

/* The entry of that name and type. */
static cJSON *find_entry(cJSON *arr, const char *name, const char *type)
{
    cJSON *e;
    cJSON_ArrayForEach(e, arr)
    {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(e, "name");
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(e, "type");
        if (cJSON_IsString(n) && strcmp(n->valuestring, name) == 0 && cJSON_IsString(t) &&
            strcmp(t->valuestring, type) == 0)
            return e;
    }
    return NULL;
}

/* The positive number in /sys/class/net/<name>/speed (Mb/s), else -1 (virtual interfaces and
 * links that are down give -1 or EINVAL). */
static long sysfs_speed(const char *name)
{
    char path[IF_NAMESIZE + 32], text[32];
    snprintf(path, sizeof(path), "/sys/class/net/%s/speed", name);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char *got = fgets(text, sizeof(text), f);
    (void)fclose(f);
    if (!got)
        return -1;
    char *end;
    long v = strtol(text, &end, 10);
    return end != text && v > 0 ? v : -1;
}

static void add_details(cJSON *e, const char *name)
{
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd >= 0) {
        struct ifreq ifr;
        memset(&ifr, 0, sizeof(ifr));
        snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", name);
        if (ioctl(fd, SIOCGIFMTU, &ifr) == 0)
            cJSON_AddNumberToObject(e, "mtu", ifr.ifr_mtu);
        close(fd);
    }
    long speed = sysfs_speed(name);
    if (speed > 0)
        cJSON_AddNumberToObject(e, "speed_mbps", (double)speed);
}

/* Append ifa's address to its interface's entry (created on first sight). */
static weft_status_t add_address(cJSON *arr, const struct ifaddrs *ifa, bool *truncated_p)
{
    cJSON *e = find_entry(arr, ifa->ifa_name, "ip");
    if (!e) {
        if (cJSON_GetArraySize(arr) >= WEFT_INVENTORY_NICS_MAX) {
            *truncated_p = true;
            return WEFT_OK;
        }
        if (!(e = cJSON_CreateObject()) || !cJSON_AddItemToArray(arr, e)) {
            cJSON_Delete(e);
            return WEFT_ERR_NOMEM;
        }
        bool up = (ifa->ifa_flags & IFF_UP) && (ifa->ifa_flags & IFF_RUNNING);
        if (!cJSON_AddStringToObject(e, "name", ifa->ifa_name) ||
            !cJSON_AddStringToObject(e, "type", "ip") || !cJSON_AddBoolToObject(e, "up", up) ||
            !cJSON_AddArrayToObject(e, "ipv4") || !cJSON_AddArrayToObject(e, "ipv6"))
            return WEFT_ERR_NOMEM;
        add_details(e, ifa->ifa_name);
    }
    bool v4 = ifa->ifa_addr->sa_family == AF_INET;
    cJSON *list = cJSON_GetObjectItemCaseSensitive(e, v4 ? "ipv4" : "ipv6");
    if (cJSON_GetArraySize(list) >= WEFT_INVENTORY_ADDRS_MAX) {
        *truncated_p = true;
        return WEFT_OK;
    }
    char text[INET6_ADDRSTRLEN];
    const void *src = v4 ? (const void *)&((const struct sockaddr_in *)ifa->ifa_addr)->sin_addr
                         : (const void *)&((const struct sockaddr_in6 *)ifa->ifa_addr)->sin6_addr;
    if (!inet_ntop(ifa->ifa_addr->sa_family, src, text, sizeof(text)))
        return WEFT_OK;
    cJSON *s = cJSON_CreateString(text);
    if (!s || !cJSON_AddItemToArray(list, s)) {
        cJSON_Delete(s);
        return WEFT_ERR_NOMEM;
    }
    return WEFT_OK;
}

static weft_status_t add_ip(cJSON *arr, bool *truncated_p)
{
    struct ifaddrs *all;
    if (getifaddrs(&all) != 0) {
        WEFT_LOG_WARN("worker", "inventory: getifaddrs: %s", strerror(errno));
        return WEFT_ERR_IO;
    }
    weft_status_t st = WEFT_OK;
    /* first the interfaces other hosts can reach, then those with link-local addresses only */
    for (int pass = 0; pass < 2 && st == WEFT_OK; pass++)
        for (const struct ifaddrs *ifa = all; ifa && st == WEFT_OK; ifa = ifa->ifa_next)
            if (is_ip(ifa) && has_routable(all, ifa->ifa_name) == (pass == 0))
                st = add_address(arr, ifa, truncated_p);
    freeifaddrs(all);
    return st;
}

/* ---------------------------------------------------------------------------------------- */
/* NUMA nodes                                                                               */

#if WEFT_HAVE_HWLOC
/* Whether an entry is a device hwloc can place: an RDMA device, or an interface backed by a
 * bus device (virtual ones, veth or bridge, have no /sys/class/net/<if>/device). */
static bool placeable(const cJSON *e)
{
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(e, "type");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "name");
    if (!cJSON_IsString(type) || !cJSON_IsString(name))
        return false;
    if (strcmp(type->valuestring, "rdma") == 0)
        return true;
    char path[IF_NAMESIZE + 32];
    snprintf(path, sizeof(path), "/sys/class/net/%s/device", name->valuestring);
    return access(path, F_OK) == 0;
}

/* The topology with I/O devices is loaded only when some entry can be placed: it costs tens of
 * milliseconds on a large machine and finds nothing for virtual interfaces. */
static void add_numa(cJSON *arr)
{
    bool any = false;
    const cJSON *e;
    cJSON_ArrayForEach(e, arr) any = any || placeable(e);
    hwloc_topology_t topo;
    if (!any || hwloc_topology_init(&topo) != 0)
        return;
    /* NICs need the Linux component only (it reads the devices' locality from sysfs): the pci
     * component's libpciaccess keeps allocations for the life of the process (LeakSanitizer
     * reports them) and, here, found no OS devices at all; the GPU-facing ones (OpenCL,
     * OpenGL, CUDA, NVML, ROCm, Level Zero) would load vendor runtimes */
    static const char *const skip[] = {"pci",  "opencl", "gl",       "cuda",
                                       "nvml", "rsmi",   "levelzero"};
    for (size_t i = 0; i < sizeof(skip) / sizeof(skip[0]); i++)
        (void)hwloc_topology_set_components(topo, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST,
                                            skip[i]);
    if (hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT) != 0 ||
        hwloc_topology_load(topo) != 0) {
        hwloc_topology_destroy(topo);
        return;
    }
    for (hwloc_obj_t o = NULL; (o = hwloc_get_next_osdev(topo, o)) != NULL;) {
        if ((o->attr->osdev.type != HWLOC_OBJ_OSDEV_NETWORK &&
             o->attr->osdev.type != HWLOC_OBJ_OSDEV_OPENFABRICS) ||
            !o->name)
            continue;
        cJSON *ent = find_entry(arr, o->name,
                                o->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK ? "ip" : "rdma");
        hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(topo, o);
        if (ent && anc && anc->nodeset && hwloc_bitmap_weight(anc->nodeset) == 1 &&
            !cJSON_GetObjectItemCaseSensitive(ent, "numa_node"))
            cJSON_AddNumberToObject(ent, "numa_node", hwloc_bitmap_first(anc->nodeset));
    }
    hwloc_topology_destroy(topo);
}
#endif

weft_status_t weft_inventory_gpus_add(cJSON *obj)
{
    const int n = weft_gpu_count();
    if (n <= 0)
        return WEFT_OK;
    cJSON *arr = cJSON_AddArrayToObject(obj, "gpus");
    if (!arr)
        return WEFT_ERR_NOMEM;
    for (int i = 0; i < n; i++) {
        struct weft_gpu_info g;
        if (weft_gpu_info(i, &g) != WEFT_OK) /* logged by the kernels */
            continue;
        cJSON *e = cJSON_CreateObject();
        if (!e || !cJSON_AddItemToArray(arr, e)) {
            cJSON_Delete(e);
            return WEFT_ERR_NOMEM;
        }
        char cc[16];
        snprintf(cc, sizeof(cc), "%d.%d", g.cc_major, g.cc_minor);
        cJSON *peers = NULL;
        if (!cJSON_AddNumberToObject(e, "index", g.index) ||
            !cJSON_AddStringToObject(e, "name", g.name) ||
            !cJSON_AddNumberToObject(e, "memory", (double)g.memory) ||
            !cJSON_AddNumberToObject(e, "sm_count", g.sm_count) ||
            !cJSON_AddStringToObject(e, "compute_capability", cc) ||
            !(peers = cJSON_AddArrayToObject(e, "peers")))
            return WEFT_ERR_NOMEM;
        for (int j = 0; j < 64; j++)
            if ((g.peers >> j) & 1)
                cJSON_AddItemToArray(peers, cJSON_CreateNumber(j));
    }
    return WEFT_OK;
}

weft_status_t weft_inventory_nics_add(cJSON *obj)
{
    cJSON *arr = cJSON_AddArrayToObject(obj, "nics");
    if (!arr)
        return WEFT_ERR_NOMEM;
    weft_status_t st = WEFT_OK;
    bool truncated = false;
#if WEFT_HAVE_IBVERBS
    st = add_rdma(arr, &truncated);
#endif
    weft_status_t ip_st = add_ip(arr, &truncated);
    if (st == WEFT_OK)
        st = ip_st;
#if WEFT_HAVE_HWLOC
    add_numa(arr);
#endif
    if (truncated)
        cJSON_AddBoolToObject(obj, "nics_truncated", true);
    return st;
}

/* One limit file: its bytes, 0 for none ("max", v1's "no limit" near 2^63), -1 when it is
 * missing or not a number. */
static int64_t limit_file(const char *path)
{
    char text[64] = "";
    FILE *f = fopen(path, "r"); /* /sys reports no size: stdio */
    if (!f)
        return -1;
    const bool got = fgets(text, sizeof(text), f) != NULL;
    (void)fclose(f); /* read only */
    if (!got)
        return -1;
    if (strncmp(text, "max", 3) == 0)
        return 0;
    char *end;
    errno = 0;
    const unsigned long long v = strtoull(text, &end, 10);
    if (errno || end == text || (*end && *end != '\n'))
        return -1;
    return v >= (1ull << 62) ? 0 : (int64_t)v;
}

/* The least limit in file name of dir/path and each folder above it up to dir; 0 for none,
 * -1 when no level has the file. */
static int64_t least_up(const char *dir, const char *path, const char *name)
{
    char rel[2048], full[4096];
    snprintf(rel, sizeof(rel), "%s", path);
    int64_t least = -1;
    for (;;) {
        snprintf(full, sizeof(full), "%s%s%s/%s", dir, rel[0] == '/' ? "" : "/", rel, name);
        const int64_t v = limit_file(full);
        if (v >= 0)
            least = least < 0 || (v > 0 && (least == 0 || v < least)) ? v : least;
        char *slash = strrchr(rel, '/');
        if (!slash || !rel[0])
            break;
        *slash = '\0';
    }
    return least;
}

uint64_t weft_inventory_cgroup_memory(const char *root, const char *self)
{
    char v2[2048] = "", v1[2048] = "", line[4096];
    bool have_v2 = false, have_v1 = false;
    FILE *f = fopen(self, "r");
    while (f && fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = '\0';
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2)
            continue;
        *c2 = '\0';
        const char *controllers = c1 + 1, *path = c2 + 1;
        if (strcmp(line, "0:") == 0) { /* v2: "0::PATH" */
            snprintf(v2, sizeof(v2), "%s", path), have_v2 = true;
            continue;
        }
        for (const char *p = controllers; *p;) { /* "memory" among "a,b,c" */
            const size_t n = strcspn(p, ",");
            if (n == 6 && strncmp(p, "memory", 6) == 0)
                snprintf(v1, sizeof(v1), "%s", path), have_v1 = true;
            p += n + (p[n] == ',');
        }
    }
    if (f)
        (void)fclose(f); /* read only */
    char dir[4096];
    /* v2 first; a v1 memory hierarchy where v2 has no memory controller */
    const int64_t a = have_v2 ? least_up(root, v2, "memory.max") : -1;
    if (a >= 0)
        return (uint64_t)a;
    snprintf(dir, sizeof(dir), "%s/memory", root);
    const int64_t b = least_up(dir, have_v1 ? v1 : "", "memory.limit_in_bytes");
    return b > 0 ? (uint64_t)b : 0;
}
