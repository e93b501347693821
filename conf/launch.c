/* Launcher environments (see launch.h). */
#include "conf/launch.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include <errno.h>
#include <stdio.h>

#include "common/files.h"
#include "common/log.h"
#include "conf/conf.h"

static const char *env_get(char *const *envp, const char *name)
{
    size_t n = strlen(name);
    for (char *const *e = envp; e && *e; e++)
        if (strncmp(*e, name, n) == 0 && (*e)[n] == '=')
            return *e + n + 1;
    return NULL;
}

static weft_status_t env_int(char *const *envp, const char *name, int lo, int *out)
{
    const char *v = env_get(envp, name);
    if (!v)
        return WEFT_OK;
    char *end;
    long x = strtol(v, &end, 10);
    if (end == v || *end || x < lo || x > 1 << 24) {
        WEFT_LOG_ERROR("conf", "environment %s='%s': expected an integer >= %d", name, v, lo);
        return WEFT_ERR_CONFIG;
    }
    *out = (int)x;
    return WEFT_OK;
}

weft_status_t weft_slurm_first_host(const char *list, char *host, size_t len)
{
    size_t n = strcspn(list, ",[");
    if (n == 0 || n >= len) {
        WEFT_LOG_ERROR("conf", "SLURM_JOB_NODELIST '%s': no first host", list);
        return WEFT_ERR_CONFIG;
    }
    memcpy(host, list, n);
    host[n] = '\0';
    if (list[n] != '[')
        return WEFT_OK;
    /* the first range's first number, zero padding kept: "node[01-04]" -> "node01" */
    const char *p = list + n + 1;
    size_t d = strspn(p, "0123456789");
    if (d == 0 || n + d >= len) {
        WEFT_LOG_ERROR("conf", "SLURM_JOB_NODELIST '%s': cannot read the first host", list);
        return WEFT_ERR_CONFIG;
    }
    memcpy(host + n, p, d);
    host[n + d] = '\0';
    return WEFT_OK;
}

weft_status_t weft_launch_from_env(char *const *envp, struct weft_launch *out)
{
    struct weft_launch l = {"", -1, -1, -1, "", 0};
    static const struct {
        const char *source, *rank, *size, *local;
    } kinds[] = {
        {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
        {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
        {"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
        {"mpich", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"},
    };
    weft_status_t st = WEFT_OK;
    /* torchrun inside a Slurm allocation sets both: the launcher nearest the process wins */
    static const int order[] = {1, 2, 3, 0};
    for (size_t k = 0; k < 4 && !l.source[0]; k++) {
        int i = order[k];
        if (!env_get(envp, kinds[i].rank))
            continue;
        l.source = kinds[i].source;
        if ((st = env_int(envp, kinds[i].rank, 0, &l.rank)) ||
            (st = env_int(envp, kinds[i].size, 1, &l.size)) ||
            (st = env_int(envp, kinds[i].local, 0, &l.local_rank)))
            return st;
    }
    const char *addr = env_get(envp, "MASTER_ADDR");
    if (addr && strlen(addr) < sizeof(l.coordinator_host))
        strcpy(l.coordinator_host, addr);
    if ((st = env_int(envp, "MASTER_PORT", 1, &l.coordinator_port)))
        return st;
    const char *nodes = env_get(envp, "SLURM_JOB_NODELIST");
    if (!l.coordinator_host[0] && nodes &&
        (st = weft_slurm_first_host(nodes, l.coordinator_host, sizeof(l.coordinator_host))))
        return st;
    *out = l;
    return WEFT_OK;
}

weft_status_t weft_cluster_secret(const struct weft_conf_cluster *c, char *out, size_t len,
                                  struct weft_error *err)
{
    if (c->secret_file[0]) {
        FILE *f = weft_files_fopen_regular(c->secret_file);
        if (!f)
            return weft_error_refuse_or_log(err, WEFT_ERR_CONFIG, "conf",
                                            "[cluster] secret_file %s: %s", c->secret_file,
                                            weft_files_open_error(errno));
        char line[1024] = "";
        char *got = fgets(line, sizeof(line), f);
        (void)fclose(f);
        line[strcspn(line, "\r\n")] = '\0';
        if (!got || !line[0] || strlen(line) >= len)
            return weft_error_refuse_or_log(err, WEFT_ERR_CONFIG, "conf",
                                            "[cluster] secret_file %s: no secret on its first "
                                            "line (or longer than %zu bytes)", c->secret_file,
                                            len - 1);
        snprintf(out, len, "%s", line);
        return WEFT_OK;
    }
    if (!c->secret[0])
        return weft_error_refuse_or_log(err, WEFT_ERR_CONFIG, "conf",
                                        "no cluster secret: set [cluster] secret or secret_file "
                                        "(or WEFT_CLUSTER_SECRET)");
    snprintf(out, len, "%s", c->secret);
    return WEFT_OK;
}
