/* `weft worker`: one process per device. It finds the coordinator, proves it knows the
 * cluster secret, reports its inventory, then does what the control messages say: join the
 * data-plane world of an assignment and load its shards, run images, report steps and send
 * the images back. It decides nothing itself. */
#ifndef WEFT_WORKER_AGENT_H
#define WEFT_WORKER_AGENT_H

#include "conf/conf.h"
#include "conf/launch.h"
#include "kernels/kernels.h"

struct weft_agent_opts {
    const struct weft_conf *conf;
    struct weft_device device; /* where it computes ([worker] device, --device, resolved) */
    const char *coordinator; /* host:port of the coordinator's worker port */
    const char *secret;
    struct weft_launch launch; /* what a launcher said (rank, local rank ...) */
};

/* Runs until the coordinator says shut down (0) or is lost (1). */
int weft_agent_main(const struct weft_agent_opts *opts);

#endif
