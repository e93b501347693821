/* The worker's inventory for its hello (agent.c): GPUs through the CUDA runtime, RDMA devices
 * through libibverbs and IP interfaces through getifaddrs, with the NUMA node of each through
 * hwloc when weft was built with them. The coordinator keeps the hello whole, so GET /v1/cluster and `weft status --json`
 * show it per worker. */
#ifndef WEFT_WORKER_INVENTORY_H
#define WEFT_WORKER_INVENTORY_H

#include <cJSON.h>
#include <stdint.h>

#include "common/status.h"

/* Most entries in "nics" (and addresses per family and interface): the hello travels in one
 * bootstrap frame (WEFT_BOOT_MAX, 64 KiB), and a container host can have hundreds of veths.
 * Interfaces with an IPv4 or a non-link-local IPv6 address come before the others. */
#define WEFT_INVENTORY_NICS_MAX 32
#define WEFT_INVENTORY_ADDRS_MAX 8

/* Add to obj a "nics" array, one object per RDMA device then per non-loopback IP interface:
 *   {"name": "mlx5_0", "type": "rdma", "ports": [{"port": 1, "state": "active",
 *    "link_layer": "infiniband", "rate_gbps": 200}], "numa_node": 1}
 *   {"name": "eth0", "type": "ip", "up": true, "ipv4": ["10.0.0.2"], "ipv6": ["fe80::1"],
 *    "mtu": 1500, "speed_mbps": 25000, "numa_node": 0}
 * speed_mbps when /sys/class/net/<if>/speed gives a positive number, numa_node when hwloc
 * knows it; "nics_truncated": true on obj when interfaces were left out. No RDMA device (or a build
 * without libibverbs) gives no rdma entry and no message. The array is added even when a source
 * fails (getifaddrs: WEFT_ERR_IO, logged); WEFT_ERR_NOMEM when it cannot be built. */
weft_status_t weft_inventory_nics_add(cJSON *obj);

/* Add to obj a "gpus" array when this process can use GPUs (none: nothing is added), one object
 * per GPU as the CUDA runtime reports it:
 *   {"index": 0, "name": "NVIDIA H200", "memory": 150109880320, "sm_count": 132,
 *    "compute_capability": "9.0", "peers": [1, 2, 3]}
 * peers: the GPUs it can reach directly (NVLink or PCIe peer access). WEFT_ERR_NOMEM when it
 * cannot be built. */
weft_status_t weft_inventory_gpus_add(cJSON *obj);

/* The memory limit of this process's cgroup: its path from self (normally "/proc/self/cgroup":
 * "0::PATH" for v2, "N:...memory...:PATH" for v1) under root (normally "/sys/fs/cgroup"),
 * the least of memory.max (v2) or memory/.../memory.limit_in_bytes (v1) in that folder and
 * every one above it (a systemd unit's MemoryMax, a container's or a Kubernetes pod's limit,
 * which sysinfo's total RAM does not show); 0 when there is none ("max", v1's page-rounded
 * 2^63, no readable file). */
uint64_t weft_inventory_cgroup_memory(const char *root, const char *self);

#endif
