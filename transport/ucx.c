/* The one UCX setup of transport/: a context and a worker as the data-plane world
 * (transport.c) and the control links (link.c) both use them, and the translation of UCX's
 * status codes into weft's. Nothing else in transport/ reads UCX's configuration or creates
 * a context or worker. */
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common/log.h"
#include "transport/internal.h"

weft_status_t weft_tp_ucs_status(ucs_status_t s)
{
    switch (s) {
    case UCS_OK: return WEFT_OK;
    case UCS_INPROGRESS: return WEFT_INPROGRESS;
    case UCS_ERR_NO_MEMORY: return WEFT_ERR_NOMEM;
    case UCS_ERR_INVALID_PARAM: return WEFT_ERR_INVALID;
    case UCS_ERR_UNSUPPORTED: return WEFT_ERR_UNSUPPORTED;
    case UCS_ERR_MESSAGE_TRUNCATED: return WEFT_ERR_PROTOCOL;
    case UCS_ERR_CANCELED: return WEFT_ERR_CANCELLED;
    case UCS_ERR_TIMED_OUT:
    case UCS_ERR_ENDPOINT_TIMEOUT: return WEFT_ERR_TIMEOUT;
    case UCS_ERR_UNREACHABLE: return WEFT_ERR_UNREACHABLE;
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_REJECTED:
    case UCS_ERR_NOT_CONNECTED: return WEFT_ERR_PEER_LOST;
    case UCS_ERR_BUSY:
    case UCS_ERR_NO_RESOURCE: return WEFT_ERR_BUSY;
    case UCS_ERR_IO_ERROR: return WEFT_ERR_IO;
    default: return WEFT_ERR_INTERNAL;
    }
}

/* Whether this process may not call process_vm_readv at all (a container's seccomp profile, a
 * kernel without it): reading its own memory, which no ptrace rule forbids, fails. */
static bool cma_forbidden(void)
{
    int mine = 1, got = 0;
    struct iovec local = {&got, sizeof(got)}, remote = {&mine, sizeof(mine)};
    return process_vm_readv(getpid(), &local, 1, &remote, 1, 0) != (ssize_t)sizeof(got);
}

/* UCX's configuration from its environment (UCX_*), with UCX_TLS replaced by tls if set. UCX
 * 1.13 aborts the process on a failed CMA copy (transport.c), so where CMA is forbidden and
 * nobody chose the transports, its CMA transport is left out. */
static weft_status_t config_read(const struct weft_tp_ucx_params *p, ucp_config_t **cfg_p)
{
    ucp_config_t *cfg;
    ucs_status_t s = ucp_config_read(NULL, NULL, &cfg);
    if (s != UCS_OK) {
        WEFT_LOG_ERROR(p->subsys, "UCX configuration: %s", ucs_status_string(s));
        return weft_tp_ucs_status(s);
    }
    const char *tls = p->tls && p->tls[0] ? p->tls : NULL;
    if (!tls && !getenv("UCX_TLS") && cma_forbidden()) {
        WEFT_LOG_INFO(p->subsys, "process_vm_readv is forbidden here: UCX runs without its CMA "
                      "transport (UCX_TLS=^cma)");
        tls = "^cma";
    }
    if (tls && (s = ucp_config_modify(cfg, "TLS", tls)) != UCS_OK) {
        WEFT_LOG_ERROR(p->subsys, "%s = '%s': UCX refuses it: %s", p->tls_key, tls,
                       ucs_status_string(s));
        ucp_config_release(cfg);
        return WEFT_ERR_CONFIG;
    }
    *cfg_p = cfg;
    return WEFT_OK;
}

weft_status_t weft_tp_ucx_open(const struct weft_tp_ucx_params *p, struct weft_tp_ucx *ucx_p)
{
    ucp_config_t *cfg = NULL;
    weft_status_t st = config_read(p, &cfg);
    if (st != WEFT_OK)
        return st;
    /* Every user sleeps on the worker's event descriptor (wakeup) between progress calls. */
    ucp_params_t up = {
        .field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME,
        .features = p->features | UCP_FEATURE_WAKEUP,
        .name = p->name,
    };
    if (p->estimated_eps) {
        up.field_mask |= UCP_PARAM_FIELD_ESTIMATED_NUM_EPS;
        up.estimated_num_eps = p->estimated_eps;
    }
    struct weft_tp_ucx u = {.efd = -1};
    ucs_status_t s = ucp_init(&up, cfg, &u.ctx);
    ucp_config_release(cfg);
    if (s != UCS_OK) {
        WEFT_LOG_ERROR(p->subsys, "UCX init: %s", ucs_status_string(s));
        return weft_tp_ucs_status(s);
    }
    /* One thread drives each worker; nothing in UCX needs to lock for us. */
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_SINGLE};
    if ((s = ucp_worker_create(u.ctx, &wp, &u.worker)) != UCS_OK) {
        WEFT_LOG_ERROR(p->subsys, "UCX worker: %s", ucs_status_string(s));
        goto err_ctx;
    }
    if ((s = ucp_worker_get_efd(u.worker, &u.efd)) != UCS_OK) {
        WEFT_LOG_ERROR(p->subsys, "UCX worker event descriptor: %s", ucs_status_string(s));
        goto err_worker;
    }
    *ucx_p = u;
    return WEFT_OK;

err_worker:
    ucp_worker_destroy(u.worker);
err_ctx:
    ucp_cleanup(u.ctx);
    return weft_tp_ucs_status(s);
}
