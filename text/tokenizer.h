/* Tokenizers: a prompt's text to the token ids a text encoder takes, exactly as transformers'
 * tokenizers give them to FluxPipeline's encoders, with no Python at run time.
 *
 * Two kinds, each read from its pipeline folder as Diffusers saves it:
 *  - CLIPTokenizer (tokenizer/: vocab.json, merges.txt, tokenizer_config.json): transformers'
 *    CLIPTokenizer pipeline (the tokenizers library's): special tokens split out, NFC, runs of
 *    white space to one space, lower case, CLIP's pre-tokenisation pattern, byte-level BPE with
 *    </w>, <|startoftext|> ... <|endoftext|>.
 *  - T5TokenizerFast (tokenizer_2/: spiece.model, tokenizer_config.json): special tokens
 *    (<pad>, </s>, <unk>, <extra_id_N>) split out, the model's own normalisation rules
 *    (its precompiled character map) applied as transformers' Precompiled normaliser applies
 *    them, words split on white space, "▁" before each, the unigram model's best segmentation
 *    (Debian's libsentencepiece), </s> at the end.
 * Both truncate to max_len (special tokens included) and pad with their pad token to max_len, as
 * FluxPipeline calls them (padding="max_length", truncation=True). What truncation dropped is
 * decoded as transformers decodes it, for the warning Diffusers logs.
 *
 * A tokenizer is immutable once open: any number of threads may encode with it at once. */
#ifndef WEFT_TEXT_TOKENIZER_H
#define WEFT_TEXT_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "model/text_encoder.h" /* WEFT_TOKENIZER_MAX_LEN */

enum weft_tokenizer_kind { WEFT_TOKENIZER_CLIP, WEFT_TOKENIZER_T5, WEFT_TOKENIZER_KIND_COUNT };

struct weft_tokenizer;

/* The kind a class name of model_index.json or tokenizer_config.json means: CLIPTokenizer,
 * CLIPTokenizerFast, T5Tokenizer, T5TokenizerFast. -1 for any other. */
int weft_tokenizer_kind_of(const char *class_name);

/* Open the tokenizer of this kind in dir (a pipeline's tokenizer/ or tokenizer_2/). err names
 * the file and what is wrong with it. */
weft_status_t weft_tokenizer_open(const char *dir, enum weft_tokenizer_kind kind,
                                  struct weft_tokenizer **tok_p, struct weft_error *err);
/* The same from files in memory (the fuzz target's entry): CLIP takes vocab.json and
 * merges.txt (b), T5 takes spiece.model (b NULL); config is tokenizer_config.json or NULL. */
weft_status_t weft_tokenizer_open_mem(enum weft_tokenizer_kind kind, const void *a, size_t a_len,
                                      const void *b, size_t b_len, const char *config,
                                      size_t config_len, struct weft_tokenizer **tok_p,
                                      struct weft_error *err);
void weft_tokenizer_close(struct weft_tokenizer *tok);

enum weft_tokenizer_kind weft_tokenizer_kind(const struct weft_tokenizer *tok);
/* Its tokenizer_config.json's model_max_length (77 for CLIP-L), within 1..WEFT_TOKENIZER_MAX_LEN
 * (absent: CLIP 77, T5 512). */
int64_t weft_tokenizer_model_max_length(const struct weft_tokenizer *tok);
/* Ids 0..vocab_size-1 (the extra ids of T5 included). */
int32_t weft_tokenizer_vocab_size(const struct weft_tokenizer *tok);
int32_t weft_tokenizer_pad_id(const struct weft_tokenizer *tok);
int32_t weft_tokenizer_eos_id(const struct weft_tokenizer *tok);
/* The token an id stands for (transformers' convert_ids_to_tokens); "" outside the vocabulary. */
const char *weft_tokenizer_piece(const struct weft_tokenizer *tok, int32_t id);

struct weft_tokens {
    int32_t *ids;         /* [len] (weft_free): padded and truncated to max_len */
    int64_t len;          /* max_len */
    int64_t used;         /* ids before the padding (specials included) */
    int64_t untruncated;  /* ids the text makes without truncation (specials included) */
    bool truncated;       /* untruncated > max_len */
    char *dropped;        /* what truncation dropped, decoded (weft_free); NULL when nothing */
};

/* Encode text[0..len) as FluxPipeline's call does, to exactly max_len ids (1 ..
 * WEFT_TOKENIZER_MAX_LEN; at least 2 for CLIP: its start and end tokens). Text that is not
 * UTF-8, or holds a NUL, is refused (WEFT_ERR_INVALID, the byte named, what naming the text).
 * out is written only on success. */
weft_status_t weft_tokenizer_encode(const struct weft_tokenizer *tok, const char *text,
                                    size_t len, int64_t max_len, const char *what,
                                    struct weft_tokens *out, struct weft_error *err);
void weft_tokens_cleanup(struct weft_tokens *t);

/* Decode ids as transformers' decode does (special tokens kept) into a new string (weft_free). */
weft_status_t weft_tokenizer_decode(const struct weft_tokenizer *tok, const int32_t *ids,
                                    int64_t n, char **text_p, struct weft_error *err);

#endif
