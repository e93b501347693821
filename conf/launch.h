/* Where a worker stands when a launcher started it: Slurm (SLURM_PROCID, SLURM_NTASKS,
 * SLURM_LOCALID, the first host of SLURM_JOB_NODELIST), torchrun (RANK, WORLD_SIZE,
 * LOCAL_RANK, MASTER_ADDR, MASTER_PORT), Open MPI's mpirun (OMPI_COMM_WORLD_RANK, _SIZE,
 * _LOCAL_RANK) or MPICH/Hydra (PMI_RANK, PMI_SIZE, MPI_LOCALRANKID); or none. Read from an
 * environment array (conf/ is the one place that reads the environment). */
#ifndef WEFT_CONF_LAUNCH_H
#define WEFT_CONF_LAUNCH_H

#include <stddef.h>

#include "common/error.h"

struct weft_launch {
    const char *source; /* "slurm", "torchrun", "mpirun", "mpich" or "" */
    int rank, size, local_rank; /* -1 when the launcher does not say */
    char coordinator_host[256]; /* "" when the launcher does not say */
    int coordinator_port;       /* 0 when the launcher does not say */
};

/* Bad values of a variable that is present (RANK=x) are errors naming it. */
weft_status_t weft_launch_from_env(char *const *envp, struct weft_launch *out);

struct weft_conf_cluster;
/* The cluster secret: the first line of [cluster] secret_file when set, else [cluster] secret.
 * An empty secret is an error naming both keys (the configuration's: recorded in err, logged at
 * ERROR with NULL err). */
weft_status_t weft_cluster_secret(const struct weft_conf_cluster *c, char *out, size_t len,
                                  struct weft_error *err);

/* The first host of a Slurm node list: "node[01-04,07],gpu5" -> "node01". */
weft_status_t weft_slurm_first_host(const char *nodelist, char *host, size_t len);

#endif
