/* Fuzz target: the tokenizers (text/). The first byte picks what the rest is:
 *   0: text for the CLIP tokenizer of tests/data/text (encoded at 77, the ids decoded back)
 *   1: text for the T5 tokenizer of tests/data/text (encoded at 64, decoded back)
 *   2: a CLIP tokenizer's files, "vocab.json NUL merges.txt NUL text": loaded, the text encoded
 *   3: a SentencePiece model file: loaded, a fixed text encoded
 * The data tokenizers are read once from $WEFT_SOURCE_ROOT (modes 0 and 1 do nothing without
 * it). Every input must end in a clean refusal or a result; nothing may crash or leak. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "text/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void quiet(enum weft_log_level l, const char *s, const char *m, void *a)
{
    (void)l, (void)s, (void)m, (void)a;
}

static struct weft_tokenizer *data_tok[2];
static int loaded;

static void load_data(void)
{
    loaded = 1;
    const char *root = getenv("WEFT_SOURCE_ROOT");
    if (!root)
        return;
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s/tests/data/text/tokenizer", root);
    (void)weft_tokenizer_open(dir, WEFT_TOKENIZER_CLIP, &data_tok[0], NULL);
    snprintf(dir, sizeof(dir), "%s/tests/data/text/tokenizer_2", root);
    (void)weft_tokenizer_open(dir, WEFT_TOKENIZER_T5, &data_tok[1], NULL);
}

static void encode(const struct weft_tokenizer *tok, const char *text, size_t len, int64_t max)
{
    struct weft_tokens t;
    struct weft_error err = WEFT_ERROR_INIT;
    if (weft_tokenizer_encode(tok, text, len, max, "fuzz", &t, &err) != WEFT_OK)
        return;
    char *back = NULL;
    if (weft_tokenizer_decode(tok, t.ids, t.used, &back, &err) == WEFT_OK)
        weft_free(back);
    for (int64_t i = 0; i < t.len; i++)
        (void)weft_tokenizer_piece(tok, t.ids[i]);
    weft_tokens_cleanup(&t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    weft_log_set_sink(quiet, NULL);
    if (!loaded)
        load_data();
    if (size < 1)
        return 0;
    const char *rest = (const char *)data + 1;
    const size_t n = size - 1;
    struct weft_error err = WEFT_ERROR_INIT;
    struct weft_tokenizer *tok = NULL;
    switch (data[0] % 4) {
    case 0:
    case 1:
        if (data_tok[data[0] % 4])
            encode(data_tok[data[0] % 4], rest, n, data[0] % 4 ? 64 : 77);
        break;
    case 2: {
        const char *z1 = memchr(rest, '\0', n);
        const char *z2 = z1 ? memchr(z1 + 1, '\0', n - (size_t)(z1 + 1 - rest)) : NULL;
        if (!z2)
            break;
        const size_t vl = (size_t)(z1 - rest), ml = (size_t)(z2 - z1 - 1);
        if (weft_tokenizer_open_mem(WEFT_TOKENIZER_CLIP, rest, vl, z1 + 1, ml, NULL, 0, &tok,
                                    &err) == WEFT_OK)
            encode(tok, z2 + 1, n - (size_t)(z2 + 1 - rest), 16);
        break;
    }
    default:
        if (weft_tokenizer_open_mem(WEFT_TOKENIZER_T5, rest, n, NULL, 0, NULL, 0, &tok, &err) ==
            WEFT_OK)
            encode(tok, "a photo of a cat, 4k <extra_id_0> caf\xc3\xa9", 31, 16);
        break;
    }
    weft_tokenizer_close(tok);
    return 0;
}
