/* A thin C face of Debian's libsentencepiece (C++): load a model from its serialized proto,
 * read its pieces, run its unigram segmentation. Nothing of C++ (exceptions included) crosses
 * it: every function reports failure by value with the library's message. */
#ifndef WEFT_TEXT_SPM_SHIM_H
#define WEFT_TEXT_SPM_SHIM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct weft_spm;

enum weft_spm_type { /* SentencePiece's ModelProto.SentencePiece.Type */
    WEFT_SPM_NORMAL = 1,
    WEFT_SPM_UNKNOWN = 2,
    WEFT_SPM_CONTROL = 3,
    WEFT_SPM_USER_DEFINED = 4,
    WEFT_SPM_UNUSED = 5,
    WEFT_SPM_BYTE = 6,
};

/* 0 on success; else msg (len bytes) holds the library's reason. */
int weft_spm_load(const void *proto, size_t len, struct weft_spm **spm_p, char *msg, size_t mlen);
void weft_spm_free(struct weft_spm *spm);
int weft_spm_size(const struct weft_spm *spm);
/* The piece of id (0 <= id < size) and its length. */
const char *weft_spm_piece(const struct weft_spm *spm, int id, size_t *len_p);
int weft_spm_type(const struct weft_spm *spm, int id);
/* The ids of text's best segmentation (*ids_p malloc()ed, *n_p of them); 0 on success, -1 out of
 * memory, else the library's failure with msg. */
int weft_spm_encode(const struct weft_spm *spm, const char *text, size_t len, int32_t **ids_p,
                    size_t *n_p, char *msg, size_t mlen);

#ifdef __cplusplus
}
#endif

#endif
