/* The control messages between the coordinator and a worker, once the worker has joined (the
 * bootstrap before it is control/boot.h). Each message is a struct with one encode and one
 * decode function; both sides check every field with the same function and the same bounds,
 * so a message one side accepts to send the other accepts to receive.
 *
 * Carriage: a control link (transport/link.h) frames each message with its type; the payload
 * is u8 WEFT_MSG_VERSION, then the fields in declaration order (control/wire.h: little-endian
 * integers, 64-bit ones exact; doubles as IEEE-754 bits; strings length-prefixed, UTF-8,
 * without NUL), then, for RUN and IMAGE, the binary tail (prompt embeddings, PNG bytes).
 *
 * A message naming a job carries the job's key first: a decoder that fails after it still
 * reports the key (m->job), so a worker can answer a RUN it cannot take with that job's DONE,
 * and no job is left without an owner. */
#ifndef WEFT_CONTROL_MSG_H
#define WEFT_CONTROL_MSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "conf/conf.h"
#include "model/job.h"
#include "model/model.h"

#define WEFT_MSG_VERSION 6
#define WEFT_MSG_ID_MAX 16      /* a worker's id: "w12" */
#define WEFT_MSG_ADDR_MAX 300   /* host:port */
#define WEFT_MSG_NAME_MAX 64    /* a prompt's name */
#define WEFT_MSG_JOB_ID_MAX 24  /* the job's API id */
#define WEFT_MSG_COMM_MAX 64
#define WEFT_MSG_LABEL_MAX 16   /* a metric label: [a-z0-9_]{1,15} */
#define WEFT_MSG_MAX_RANKS 65536
#define WEFT_MSG_MAX_UNITS (1 << 20)

enum weft_msg_type {
    WEFT_MSG_HELLO = 1, /* W->C: the first message on a link, names the worker */
    WEFT_MSG_ASSIGN,    /* C->W: a place in a mesh and what to load */
    WEFT_MSG_ASSIGNED,  /* W->C: the assignment loaded, or why not */
    WEFT_MSG_RUN,       /* C->W: images of a job for this worker's replica; tail: prompts */
    WEFT_MSG_STEP,      /* W->C: a denoising step ended */
    WEFT_MSG_IMAGE,     /* W->C: an image; tail: PNG */
    WEFT_MSG_DONE,      /* W->C: the replica finished its images of a job, or failed them */
    WEFT_MSG_CANCEL,    /* C->W: stop a job at its next step */
    WEFT_MSG_RESET,     /* C->W: drop the assignment and the data-plane world */
    WEFT_MSG_SHUTDOWN,  /* C->W: exit */
    WEFT_MSG_PING,      /* either way: heartbeat */
    WEFT_MSG_TYPE_COUNT
};

const char *weft_msg_name(unsigned type);

struct weft_msg_hello {
    char id[WEFT_MSG_ID_MAX];
};

/* device_map: the rank's stage of the transformer's layer pipeline (mesh.pp stages). */
struct weft_msg_stage {
    bool on;
    int32_t unit_first, unit_last; /* the transformer units it runs, [first, last) */
    int32_t prev, next;            /* neighbouring stages that hold units, -1: none */
    int32_t root;                  /* the stage that computes the model's output */
    int32_t clip, t5;              /* the stages that run the text encoders, -1: none */
};

struct weft_msg_assign {
    uint64_t epoch;              /* the plan's number: answers name it */
    char model[WEFT_CONF_PATH];  /* the pipeline folder, as the workers see it */
    char rdv[WEFT_MSG_ADDR_MAX]; /* the data-plane rendezvous, "" for a one-rank mesh */
    int32_t world_size, world_rank, world_base; /* mesh rank = world_rank - world_base */
    struct weft_layout layout;
    bool tp_full_then_shard;
    bool decode;                 /* this rank loads the VAE and sends the images */
    int32_t compute;             /* [model] dtype: enum weft_dtype, f32, bf16 or f16 */
    int32_t threads;             /* CPU kernel threads: its share of its host's cores (0: keep
                                  * its own, a count the worker was started with) */
    struct weft_msg_stage stage;
    struct weft_conf_map tp_plan; /* [tp_plan] overrides of the model's plan */
};

struct weft_msg_assigned {
    uint64_t epoch;
    int32_t status; /* weft_status_t */
    char error[WEFT_ERROR_MSG];
    uint64_t transformer_bytes, vae_bytes;
    uint64_t text_bytes; /* the text encoders this rank holds (the replica's first rank) */
    int32_t threads; /* its CPU kernel threads now */
    uint64_t kept_bytes; /* weights kept loaded from its previous assignment (not read again) */
};

/* A prompt: precomputed embeddings (in RUN's tail), or text the replica encodes (its first rank
 * runs the encoders and shares the result: tokens is then max_sequence_length, and the tail
 * holds nothing for it). */
struct weft_msg_prompt {
    int64_t tokens;               /* T of prompt_embeds [1, T, joint] */
    int64_t joint, pooled;        /* the model's joint_attention_dim, pooled_projection_dim */
    char name[WEFT_MSG_NAME_MAX]; /* for the PNG ("" for an inline prompt or text) */
    bool is_text;
    char *text;                   /* is_text: the prompt (owned by a decoded RUN, borrowed when
                                   * encoding; "" is a text too); NULL otherwise */
};

struct weft_msg_image_ref {
    int64_t index;  /* the image's index in the job: its noise */
    int32_t prompt; /* its prompt, an index into prompts[] */
};

/* RUN's tail: for each embeddings prompt in order, prompt_embeds [T, joint] then pooled [pooled],
 * f32. */
struct weft_msg_run {
    uint64_t job; /* the job's key: first on the wire */
    uint64_t epoch;
    char job_id[WEFT_MSG_JOB_ID_MAX];
    char model_name[WEFT_CONF_PATH]; /* for the PNG */
    int64_t height, width, steps;
    double guidance;
    uint64_t seed;
    int32_t n_prompts, n_images;
    /* true classifier-free guidance: the last n_negatives of prompts[] are the negative prompts
     * of the first ones, in order (0, or half of n_prompts), used when true_cfg_scale > 1 */
    int32_t n_negatives;
    double true_cfg_scale;
    struct weft_msg_prompt *prompts;   /* [n_prompts] */
    struct weft_msg_image_ref *images; /* [n_images] */
    float *embeds; /* the tail: owned by a decoded message, borrowed when encoding */
    size_t n_embeds;
};

struct weft_msg_step {
    uint64_t job;
    int64_t image;
    int32_t step, steps; /* step of steps, 1-based */
    double seconds;
};

struct weft_msg_image {
    uint64_t job;
    int64_t image;
    int32_t width, height;
    double denoise_s, decode_s;
    const void *png; /* borrowed: the encoder's caller's, or the decoded buffer's */
    size_t png_len;
};

struct weft_msg_comm {
    char group[WEFT_MSG_LABEL_MAX], op[WEFT_MSG_LABEL_MAX];
    double seconds, bytes;
    uint64_t calls;
};

struct weft_msg_done {
    uint64_t job;
    int32_t status; /* weft_status_t: WEFT_OK, WEFT_ERR_CANCELLED or the failure */
    char error[WEFT_ERROR_MSG];
    bool peer; /* the failure is a consequence of another rank's, whose DONE has the cause */
    int32_t n_comm;
    struct weft_msg_comm comm[WEFT_MSG_COMM_MAX]; /* the job's collectives on this rank */
    uint64_t prompt_cache_hits, prompt_cache_misses; /* this job's text prompts on this rank */
};

struct weft_msg_job {
    uint64_t job;
};

struct weft_msg_epoch {
    uint64_t epoch;
};

/* The message of each type: HELLO hello, ASSIGN assign, ASSIGNED assigned, RUN run, STEP
 * step, IMAGE image, DONE done, CANCEL job, RESET epoch, SHUTDOWN and PING nothing (NULL). */
union weft_msg {
    struct weft_msg_hello hello;
    struct weft_msg_assign assign;
    struct weft_msg_assigned assigned;
    struct weft_msg_run run;
    struct weft_msg_step step;
    struct weft_msg_image image;
    struct weft_msg_done done;
    struct weft_msg_job job;
    struct weft_msg_epoch epoch;
};

/* Check a message of the given type (the same bounds the decoder applies), then encode it into
 * a new buffer (weft_free). WEFT_ERR_INVALID with err naming the field when the message breaks
 * a bound (nothing is sent then), WEFT_ERR_NOMEM when the buffer cannot grow. */
weft_status_t weft_msg_encode(unsigned type, const union weft_msg *msg, void **buf_p,
                              size_t *len_p, struct weft_error *err);
/* Decode and check a payload of the given type into msg. A decoded RUN owns its arrays and
 * embeddings (weft_msg_cleanup); a decoded IMAGE points into buf. On failure err names the
 * field and msg's job key (RUN, STEP, IMAGE, DONE, CANCEL) holds the key when it could be read,
 * 0 otherwise; nothing else of msg is meaningful. */
weft_status_t weft_msg_decode(unsigned type, const void *buf, size_t len, union weft_msg *msg,
                              struct weft_error *err);
/* Free what a decoded message owns (RUN); any other type: nothing. */
void weft_msg_cleanup(unsigned type, union weft_msg *msg);

/* The same bounds, for the sender's own structures (encode calls it). */
weft_status_t weft_msg_check(unsigned type, const union weft_msg *msg, struct weft_error *err);

/* A prompt's floats in RUN's tail: tokens x joint + pooled (0 for a text prompt). */
size_t weft_msg_prompt_floats(const struct weft_msg_prompt *p);

#endif
