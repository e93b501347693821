/* The job journal: an append-only file of checksummed JSON records, one per line
 * ("<crc32 hex> <json>\n"), so a coordinator restart loses no accepted job.
 *
 * Replay hands every intact record to a callback in file order; a record whose checksum or JSON
 * does not hold (a torn write at a crash, a damaged disk block) is skipped with a warning, and a
 * torn last line is cut off so that appends start on a line boundary again. Compaction rewrites
 * the file beside itself with only the records the owner still needs and renames it into place,
 * so a crash at any point leaves either the old journal or the new one. Not thread-safe: the
 * coordinator's loop thread is its only user. */
#ifndef WEFT_COORDINATOR_JOURNAL_H
#define WEFT_COORDINATOR_JOURNAL_H

#include <cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

#define WEFT_JOURNAL_MAX_RECORD (1u << 20)

struct weft_journal;

/* A replayed record; line is its 1-based line number, for messages. */
typedef void (*weft_journal_replay_cb)(void *arg, const cJSON *record, size_t line);

/* Create dir if needed, open (or create) dir/journal and replay it. */
weft_status_t weft_journal_open(const char *dir, weft_journal_replay_cb cb, void *arg,
                                struct weft_journal **journal_p);
void weft_journal_close(struct weft_journal *j);

/* Append one record; with sync, it is on disk (fdatasync) when this returns WEFT_OK. A failure
 * is logged once and recorded in err. */
weft_status_t weft_journal_append(struct weft_journal *j, const cJSON *record, bool sync,
                                  struct weft_error *err);

/* Rewrite the journal with the records fill() adds through weft_journal_compact_add(). */
struct weft_journal_compaction;
typedef weft_status_t (*weft_journal_fill_cb)(void *arg, struct weft_journal_compaction *c);
weft_status_t weft_journal_compact(struct weft_journal *j, weft_journal_fill_cb fill, void *arg);
weft_status_t weft_journal_compact_add(struct weft_journal_compaction *c, const cJSON *record);

/* Bytes in the file now, and right after the last compaction (or open). */
uint64_t weft_journal_size(const struct weft_journal *j);
uint64_t weft_journal_base_size(const struct weft_journal *j);
/* Records skipped at replay because they were damaged. */
size_t weft_journal_skipped(const struct weft_journal *j);

/* CRC-32 (IEEE 802.3, as zlib) of len bytes. */
uint32_t weft_crc32(const void *data, size_t len);

#endif
