/* CLIP's tokenizer as transformers' CLIPTokenizer runs it (the tokenizers library's pipeline):
 *
 *   special tokens (added vocabulary) -> normaliser: NFC, \s+ -> " ", lower case
 *   -> pre-tokeniser: CLIP's pattern
 *        <\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+
 *      (matches kept, the white space between them dropped), then ByteLevel's GPT-2 pattern
 *      inside each match, each piece's bytes as GPT-2's printable characters
 *   -> BPE: one symbol per character, "</w>" on the last, merges by rank (the lowest first, the
 *      leftmost among equals), as tokenizers' BPE::merge_word does.
 * Decoding is ByteLevel's (characters back to bytes, lossy UTF-8), then "</w>" -> " " and the
 * ends trimmed, as CLIPTokenizer's decode wrapper does. */
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/num.h"
#include "text/internal.h"
#include "text/unicode.h"

#define EOW "</w>"
#define EOW_LEN 4
#define MAX_SPECIAL 8

struct merge {
    int32_t a, b;     /* the pair's ids */
    int32_t rank, id; /* its line, the merged token's id */
};

struct weft_clip_bpe {
    int32_t n_vocab;
    char *arena;        /* the tokens' bytes, NUL after each */
    const char **tok;   /* [n_vocab] */
    uint32_t *tok_len;
    struct weft_strmap vocab;
    struct merge *merges; /* open-addressed by (a, b) */
    size_t merge_cap;
    int32_t byte_id[256], byte_eow_id[256]; /* a lone byte's symbol, and with </w> */
    char byte_chr[256][3];                  /* GPT-2's character of each byte (UTF-8) */
    uint8_t byte_chr_len[256];
    int16_t chr_byte[512];                  /* the byte of a character below U+0200, -1 */
    struct weft_special special[MAX_SPECIAL];
    char special_text[MAX_SPECIAL][64];
    int n_special;
    int32_t bos, eos, pad, unk;
};

/* GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the others for
 * U+0100 + their order. */
static void byte_table(struct weft_clip_bpe *b)
{
    for (int i = 0; i < 512; i++)
        b->chr_byte[i] = -1;
    int n = 0;
    for (int c = 0; c < 256; c++) {
        bool printable = (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE;
        int32_t cp = printable ? c : 256 + n++;
        b->byte_chr_len[c] = (uint8_t)weft_text_put(cp, b->byte_chr[c]);
        b->chr_byte[cp] = (int16_t)c;
    }
}

static uint64_t pair_hash(int32_t a, int32_t b)
{
    uint64_t h = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    return h ^ (h >> 33);
}

static const struct merge *merge_get(const struct weft_clip_bpe *b, int32_t x, int32_t y)
{
    size_t mask = b->merge_cap - 1, i = (size_t)pair_hash(x, y) & mask;
    while (b->merges[i].id >= 0) {
        if (b->merges[i].a == x && b->merges[i].b == y)
            return &b->merges[i];
        i = (i + 1) & mask;
    }
    return NULL;
}

/* ---------------------------------------------------------------------------------------- */
/* Loading                                                                                   */

static weft_status_t load_vocab(struct weft_clip_bpe *b, const char *json, size_t len,
                                const char *origin, struct weft_error *err)
{
    cJSON *v = cJSON_ParseWithLength(json, len);
    if (!cJSON_IsObject(v)) {
        cJSON_Delete(v);
        return weft_error_refuse(err, WEFT_ERR_FORMAT, "%s/vocab.json: not a JSON object", origin);
    }
    weft_status_t st = WEFT_OK;
    int n = cJSON_GetArraySize(v);
    size_t bytes = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, v)
    {
        int64_t id;
        if (!cJSON_IsNumber(e) || !weft_double_int(e->valuedouble, 0, n - 1, &id)) {
            st = weft_error_refuse(err, WEFT_ERR_FORMAT,
                                   "%s/vocab.json: the id of \"%.40s\" is not an integer in "
                                   "0..%d (the ids must be 0..n-1)", origin, e->string, n - 1);
            goto out;
        }
        bytes += strlen(e->string) + 1;
    }
    if (n < 1) {
        st = weft_error_refuse(err, WEFT_ERR_FORMAT, "%s/vocab.json: no tokens", origin);
        goto out;
    }
    b->n_vocab = n;
    b->arena = weft_malloc(bytes + 1);
    b->tok = weft_calloc((size_t)n, sizeof(*b->tok));
    b->tok_len = weft_calloc((size_t)n, sizeof(*b->tok_len));
    if (!b->arena || !b->tok || !b->tok_len || weft_strmap_init(&b->vocab, (size_t)n) != WEFT_OK) {
        st = weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
        goto out;
    }
    size_t off = 0;
    cJSON_ArrayForEach(e, v)
    {
        const int32_t id = (int32_t)e->valuedouble; /* an integer in 0..n-1: checked above */
        size_t l = strlen(e->string);
        if (b->tok[id]) {
            st = weft_error_refuse(err, WEFT_ERR_FORMAT, "%s/vocab.json: id %d is given twice",
                                   origin, id);
            goto out;
        }
        memcpy(b->arena + off, e->string, l + 1);
        b->tok[id] = b->arena + off;
        b->tok_len[id] = (uint32_t)l;
        off += l + 1;
        bool added;
        if (weft_strmap_put(&b->vocab, b->tok[id], l, id, &added) != WEFT_OK) {
            st = weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
            goto out;
        }
        if (!added) {
            st = weft_error_refuse(err, WEFT_ERR_FORMAT, "%s/vocab.json: \"%.40s\" is given "
                                   "twice", origin, e->string);
            goto out;
        }
    }
out:
    cJSON_Delete(v);
    return st;
}

static void add_merge(struct weft_clip_bpe *b, int32_t x, int32_t y, int32_t rank,
                               int32_t id)
{
    size_t mask = b->merge_cap - 1, i = (size_t)pair_hash(x, y) & mask;
    while (b->merges[i].id >= 0) {
        if (b->merges[i].a == x && b->merges[i].b == y) {
            b->merges[i].rank = rank; /* a pair given twice keeps its last line, as the
                                       * tokenizers library's map of merges does */
            b->merges[i].id = id;
            return;
        }
        i = (i + 1) & mask;
    }
    b->merges[i] = (struct merge){x, y, rank, id};
}

static weft_status_t load_merges(struct weft_clip_bpe *b, const char *text, size_t len,
                                 const char *origin, struct weft_error *err)
{
    size_t lines = 1;
    for (size_t i = 0; i < len; i++)
        lines += text[i] == '\n';
    b->merge_cap = 16;
    while (b->merge_cap < lines * 2)
        b->merge_cap *= 2;
    b->merges = weft_malloc(b->merge_cap * sizeof(*b->merges));
    if (!b->merges)
        return weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < b->merge_cap; i++)
        b->merges[i].id = -1;
    size_t pos = 0, line = 0;
    int32_t rank = 0;
    char joined[512];
    while (pos < len) {
        const char *s = text + pos;
        const char *nl = memchr(s, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - s) : len - pos;
        pos += n + (nl ? 1 : 0);
        line++;
        if (n && s[n - 1] == '\r')
            n--;
        if (n >= 8 && memcmp(s, "#version", 8) == 0)
            continue;
        if (n == 0 && !nl)
            break;
        const char *sp = memchr(s, ' ', n);
        if (!sp || sp == s || sp == s + n - 1 || memchr(sp + 1, ' ', n - (size_t)(sp - s) - 1))
            return weft_error_refuse(err, WEFT_ERR_FORMAT,
                                     "%s/merges.txt:%zu: not two tokens separated by one space",
                                     origin, line);
        size_t la = (size_t)(sp - s), lb = n - la - 1;
        int32_t x = weft_strmap_get(&b->vocab, s, la), y = weft_strmap_get(&b->vocab, sp + 1, lb);
        if (la + lb >= sizeof(joined))
            return weft_error_refuse(err, WEFT_ERR_FORMAT, "%s/merges.txt:%zu: tokens too long",
                                     origin, line);
        memcpy(joined, s, la);
        memcpy(joined + la, sp + 1, lb);
        int32_t z = weft_strmap_get(&b->vocab, joined, la + lb);
        if (x < 0 || y < 0 || z < 0)
            return weft_error_refuse(err, WEFT_ERR_FORMAT,
                                     "%s/merges.txt:%zu: \"%.*s\" is not in vocab.json", origin,
                                     line, (int)(x < 0 ? la : y < 0 ? lb : la + lb),
                                     x < 0 ? s : y < 0 ? sp + 1 : joined);
        add_merge(b, x, y, rank++, z);
    }
    return WEFT_OK;
}

/* A special token: its text from the config (or the default), which must be in the vocabulary. */
static weft_status_t special(struct weft_clip_bpe *b, const cJSON *config, const char *key,
                             const char *def, const char *origin, int32_t *id_p,
                             struct weft_error *err)
{
    const char *t = weft_tok_config_token(config, key);
    if (!t)
        t = def;
    int32_t id = weft_strmap_get(&b->vocab, t, strlen(t));
    if (id < 0)
        return weft_error_refuse(err, WEFT_ERR_FORMAT, "%s: %s \"%.40s\" is not in vocab.json",
                                 origin, key, t);
    *id_p = id;
    for (int k = 0; k < b->n_special; k++)
        if (b->special[k].id == id)
            return WEFT_OK;
    if (b->n_special == MAX_SPECIAL || strlen(t) >= sizeof(b->special_text[0]))
        return weft_error_refuse(err, WEFT_ERR_FORMAT, "%s: %s \"%.40s\" is too long", origin,
                                 key, t);
    char *text = b->special_text[b->n_special];
    snprintf(text, sizeof(b->special_text[0]), "%s", t);
    b->special[b->n_special++] = (struct weft_special){
        text, strlen(text), id, weft_tok_config_normalized(config, t, true)};
    return WEFT_OK;
}

static weft_status_t byte_symbols(struct weft_clip_bpe *b, const char *origin,
                                  struct weft_error *err)
{
    for (int c = 0; c < 256; c++) {
        char s[8];
        size_t l = b->byte_chr_len[c];
        memcpy(s, b->byte_chr[c], l);
        b->byte_id[c] = weft_strmap_get(&b->vocab, s, l);
        static const char eow[EOW_LEN] = {'<', '/', 'w', '>'};
        memcpy(s + l, eow, sizeof(eow));
        b->byte_eow_id[c] = weft_strmap_get(&b->vocab, s, l + EOW_LEN);
    }
    (void)origin, (void)err; /* a missing byte symbol encodes as the unknown token */
    return WEFT_OK;
}

weft_status_t weft_clip_bpe_load(const char *vocab_json, size_t vocab_len, const char *merges,
                                 size_t merges_len, const cJSON *config, const char *origin,
                                 struct weft_clip_bpe **bpe_p, struct weft_error *err)
{
    struct weft_clip_bpe *b = weft_calloc(1, sizeof(*b));
    if (!b)
        return weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
    byte_table(b);
    weft_status_t st = load_vocab(b, vocab_json, vocab_len, origin, err);
    if (st == WEFT_OK)
        st = load_merges(b, merges, merges_len, origin, err);
    /* transformers' CLIPTokenizer defaults; the unknown token first (it is the end token
     * in CLIP-L's files), then the start, end and pad tokens */
    if (st == WEFT_OK)
        st = special(b, config, "unk_token", "<|endoftext|>", origin, &b->unk, err);
    if (st == WEFT_OK)
        st = special(b, config, "bos_token", "<|startoftext|>", origin, &b->bos, err);
    if (st == WEFT_OK)
        st = special(b, config, "eos_token", "<|endoftext|>", origin, &b->eos, err);
    if (st == WEFT_OK)
        st = special(b, config, "pad_token", "<|endoftext|>", origin, &b->pad, err);
    if (st == WEFT_OK)
        st = byte_symbols(b, origin, err);
    if (st != WEFT_OK) {
        weft_clip_bpe_free(b);
        return st;
    }
    *bpe_p = b;
    return WEFT_OK;
}

void weft_clip_bpe_free(struct weft_clip_bpe *bpe)
{
    if (!bpe)
        return;
    weft_strmap_cleanup(&bpe->vocab);
    weft_free(bpe->arena);
    weft_free((void *)bpe->tok);
    weft_free(bpe->tok_len);
    weft_free(bpe->merges);
    weft_free(bpe);
}

int32_t weft_clip_bpe_vocab_size(const struct weft_clip_bpe *bpe)
{
    return bpe->n_vocab;
}

const char *weft_clip_bpe_piece(const struct weft_clip_bpe *bpe, int32_t id)
{
    return id >= 0 && id < bpe->n_vocab ? bpe->tok[id] : "";
}

void weft_clip_bpe_ids(const struct weft_clip_bpe *bpe, int32_t *bos, int32_t *eos, int32_t *pad)
{
    *bos = bpe->bos, *eos = bpe->eos, *pad = bpe->pad;
}

/* ---------------------------------------------------------------------------------------- */
/* BPE of one word                                                                           */

struct sym {
    int32_t id;
    int32_t prev, next; /* -1: none */
    bool gone;
};

struct qent {
    int32_t rank, pos, id;
};

static bool qless(const struct qent *x, const struct qent *y)
{
    return x->rank != y->rank ? x->rank < y->rank : x->pos < y->pos;
}

struct heap {
    struct qent *v;
    size_t n, cap;
};

static weft_status_t heap_push(struct heap *h, struct qent e)
{
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 64;
        struct qent *v = weft_realloc(h->v, cap * sizeof(*v));
        if (!v)
            return WEFT_ERR_NOMEM;
        h->v = v, h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0 && qless(&e, &h->v[(i - 1) / 2])) {
        h->v[i] = h->v[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->v[i] = e;
    return WEFT_OK;
}

static struct qent heap_pop(struct heap *h)
{
    struct qent top = h->v[0], last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && qless(&h->v[c + 1], &h->v[c]))
            c++;
        if (!qless(&h->v[c], &last))
            break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n)
        h->v[i] = last;
    return top;
}

static weft_status_t queue_pair(const struct weft_clip_bpe *b, struct heap *q,
                                const struct sym *s, int32_t pos)
{
    if (s[pos].next < 0)
        return WEFT_OK;
    const struct merge *m = merge_get(b, s[pos].id, s[s[pos].next].id);
    return m ? heap_push(q, (struct qent){m->rank, pos, m->id}) : WEFT_OK;
}

/* The ids of one piece (bytes, before the byte-level mapping) onto out. */
static weft_status_t bpe_word(const struct weft_clip_bpe *b, const unsigned char *w, size_t n,
                              struct sym *s, struct heap *q, struct weft_ids *out)
{
    for (size_t i = 0; i < n; i++) {
        int32_t id = i + 1 == n ? b->byte_eow_id[w[i]] : b->byte_id[w[i]];
        s[i] = (struct sym){id >= 0 ? id : b->unk, (int32_t)i - 1,
                            i + 1 < n ? (int32_t)i + 1 : -1, false};
    }
    q->n = 0;
    weft_status_t st = WEFT_OK;
    for (size_t i = 0; i + 1 < n && st == WEFT_OK; i++)
        st = queue_pair(b, q, s, (int32_t)i);
    while (st == WEFT_OK && q->n) {
        struct qent top = heap_pop(q);
        struct sym *cur = &s[top.pos];
        if (cur->gone || cur->next < 0)
            continue;
        const struct merge *m = merge_get(b, cur->id, s[cur->next].id);
        if (!m || m->id != top.id) /* a stale entry: the pair changed since */
            continue;
        struct sym *right = &s[cur->next];
        cur->id = top.id;
        right->gone = true;
        cur->next = right->next;
        if (right->next >= 0)
            s[right->next].prev = top.pos;
        if (cur->prev >= 0)
            st = queue_pair(b, q, s, cur->prev);
        if (st == WEFT_OK)
            st = queue_pair(b, q, s, top.pos);
    }
    for (int32_t i = n ? 0 : -1; st == WEFT_OK && i >= 0; i = s[i].next)
        st = weft_ids_push(out, s[i].id);
    return st;
}

/* ---------------------------------------------------------------------------------------- */
/* Pre-tokenisation                                                                          */

enum cls { C_SPACE, C_LETTER, C_NUMBER, C_OTHER };

static enum cls cls_of(int32_t cp)
{
    if (weft_text_is_space(cp))
        return C_SPACE;
    if (weft_text_is_letter(cp))
        return C_LETTER;
    return weft_text_is_number(cp) ? C_NUMBER : C_OTHER;
}

static size_t contraction(const char *s, size_t n)
{
    static const char *const c[] = {"'s", "'t", "'re", "'ve", "'m", "'ll", "'d"};
    for (size_t k = 0; k < sizeof(c) / sizeof(c[0]); k++) {
        size_t l = strlen(c[k]);
        if (l <= n && memcmp(s, c[k], l) == 0)
            return l;
    }
    return 0;
}

/* The end of a run of one class from pos (numbers: one code point when single). */
static size_t run_end(const char *s, size_t n, size_t pos, enum cls want, bool single)
{
    size_t end = pos;
    while (end < n) {
        size_t nx = end;
        if (cls_of(weft_text_next(s, n, &nx)) != want)
            break;
        end = nx;
        if (single)
            break;
    }
    return end;
}

struct scratch {
    struct sym *sym;
    size_t sym_cap;
    struct heap q;
};

static weft_status_t piece_bpe(const struct weft_clip_bpe *b, const char *p, size_t n,
                               struct scratch *sc, struct weft_ids *out)
{
    if (n > sc->sym_cap) {
        struct sym *v = weft_realloc(sc->sym, n * sizeof(*v));
        if (!v)
            return WEFT_ERR_NOMEM;
        sc->sym = v, sc->sym_cap = n;
    }
    return bpe_word(b, (const unsigned char *)p, n, sc->sym, &sc->q, out);
}

/* ByteLevel's GPT-2 pattern inside one match of CLIP's ('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+|
 * ?\p{N}+| ?[^\s\p{L}\p{N}]+: a match holds no white space), each part through BPE. */
static weft_status_t gpt2_split(const struct weft_clip_bpe *b, const char *s, size_t n,
                                struct scratch *sc, struct weft_ids *out)
{
    size_t pos = 0;
    weft_status_t st = WEFT_OK;
    while (pos < n && st == WEFT_OK) {
        size_t end = pos + contraction(s + pos, n - pos);
        if (end == pos) {
            size_t nx = pos;
            enum cls c = cls_of(weft_text_next(s, n, &nx));
            end = run_end(s, n, pos, c, false);
        }
        st = piece_bpe(b, s + pos, end - pos, sc, out);
        pos = end;
    }
    return st;
}

/* CLIP's pattern over normalised text without special tokens. */
static weft_status_t clip_split(const struct weft_clip_bpe *b, const char *s, size_t n,
                                struct scratch *sc, struct weft_ids *out)
{
    static const char sot[] = "<|startoftext|>", eot[] = "<|endoftext|>";
    size_t pos = 0;
    weft_status_t st = WEFT_OK;
    while (pos < n && st == WEFT_OK) {
        size_t nx = pos;
        enum cls c = cls_of(weft_text_next(s, n, &nx));
        if (c == C_SPACE) {
            pos = nx;
            continue;
        }
        size_t end;
        if (n - pos >= sizeof(sot) - 1 && memcmp(s + pos, sot, sizeof(sot) - 1) == 0)
            end = pos + sizeof(sot) - 1;
        else if (n - pos >= sizeof(eot) - 1 && memcmp(s + pos, eot, sizeof(eot) - 1) == 0)
            end = pos + sizeof(eot) - 1;
        else if ((end = pos + contraction(s + pos, n - pos)) > pos)
            ;
        else
            end = run_end(s, n, pos, c, c == C_NUMBER);
        st = gpt2_split(b, s + pos, end - pos, sc, out);
        pos = end;
    }
    return st;
}

/* NFC, every run of white space to one space, lower case. */
static weft_status_t normalize(const char *s, size_t n, struct weft_str *out,
                               struct weft_error *err)
{
    char *nfc;
    size_t len;
    weft_status_t st = weft_text_nfc(s, n, &nfc, &len, err);
    if (st != WEFT_OK)
        return st;
    size_t pos = 0;
    bool in_space = false;
    while (pos < len && st == WEFT_OK) {
        int32_t cp = weft_text_next(nfc, len, &pos);
        if (weft_text_is_space(cp)) {
            if (!in_space)
                st = weft_str_add(out, " ", 1);
            in_space = true;
            continue;
        }
        in_space = false;
        int32_t low[2];
        int k = weft_text_lower(cp, low);
        for (int i = 0; i < k && st == WEFT_OK; i++) {
            char u[4];
            st = weft_str_add(out, u, weft_text_put(low[i], u));
        }
    }
    weft_free(nfc);
    if (st == WEFT_OK)
        st = weft_str_add(out, "", 0);
    return st == WEFT_OK ? st : weft_error_refuse(err, st, "out of memory");
}

/* The text between special tokens of one kind: normalised ones are looked for in the
 * normalised text. */
static weft_status_t encode_normalized(const struct weft_clip_bpe *b, const char *s, size_t n,
                                       struct scratch *sc, struct weft_ids *out,
                                       struct weft_error *err)
{
    struct weft_str norm = {0};
    weft_status_t st = normalize(s, n, &norm, err);
    size_t pos = 0;
    while (st == WEFT_OK && pos < norm.n) {
        size_t at = norm.n;
        int k = weft_special_find(b->special, b->n_special, true, norm.s, norm.n, pos, &at);
        st = clip_split(b, norm.s + pos, at - pos, sc, out);
        if (st == WEFT_OK && k >= 0)
            st = weft_ids_push(out, b->special[k].id);
        pos = k >= 0 ? at + b->special[k].len : norm.n;
    }
    weft_str_cleanup(&norm);
    return st;
}

weft_status_t weft_clip_bpe_encode(const struct weft_clip_bpe *bpe, const char *text, size_t len,
                                   struct weft_ids *out, struct weft_error *err)
{
    struct scratch sc = {0};
    weft_status_t st = WEFT_OK;
    size_t pos = 0;
    while (st == WEFT_OK && pos < len) {
        size_t at = len;
        int k = weft_special_find(bpe->special, bpe->n_special, false, text, len, pos, &at);
        if (at > pos)
            st = encode_normalized(bpe, text + pos, at - pos, &sc, out, err);
        if (st == WEFT_OK && k >= 0)
            st = weft_ids_push(out, bpe->special[k].id);
        pos = k >= 0 ? at + bpe->special[k].len : len;
    }
    weft_free(sc.sym);
    weft_free(sc.q.v);
    return st == WEFT_OK ? st : weft_error_refuse(err, st, "out of memory");
}

/* Python's str.isspace(): White_Space and the separators U+001C..U+001F. */
static bool py_space(int32_t cp)
{
    return weft_text_is_space(cp) || (cp >= 0x1C && cp <= 0x1F);
}

weft_status_t weft_clip_bpe_decode(const struct weft_clip_bpe *bpe, const int32_t *ids,
                                   int64_t n, struct weft_str *out, struct weft_error *err)
{
    struct weft_str bytes = {0}, text = {0};
    weft_status_t st = weft_str_add(&bytes, "", 0);
    for (int64_t i = 0; i < n && st == WEFT_OK; i++) {
        const char *t = weft_clip_bpe_piece(bpe, ids[i]);
        size_t tl = strlen(t), pos = 0;
        while (pos < tl && st == WEFT_OK) {
            size_t from = pos;
            int32_t cp = weft_text_next(t, tl, &pos);
            int16_t byte = cp < 512 ? bpe->chr_byte[cp] : -1;
            char c = (char)byte;
            st = byte >= 0 ? weft_str_add(&bytes, &c, 1) : weft_str_add(&bytes, t + from, pos - from);
        }
    }
    if (st == WEFT_OK)
        st = weft_str_add_lossy(&text, bytes.s, bytes.n);
    /* "</w>" -> " ", then Python's str.strip() */
    struct weft_str spaced = {0};
    for (size_t i = 0; st == WEFT_OK && i < text.n;) {
        bool eow = text.n - i >= EOW_LEN && memcmp(text.s + i, EOW, EOW_LEN) == 0;
        st = weft_str_add(&spaced, eow ? " " : text.s + i, 1);
        i += eow ? EOW_LEN : 1;
    }
    if (st == WEFT_OK)
        st = weft_str_add(&spaced, "", 0);
    if (st == WEFT_OK) {
        size_t a = 0, z = spaced.n, p = 0;
        while (p < z) { /* leading */
            size_t q = p;
            if (!py_space(weft_text_next(spaced.s, z, &q)))
                break;
            a = p = q;
        }
        size_t last = a;
        for (p = a; p < z;) {
            size_t q = p;
            bool sp = py_space(weft_text_next(spaced.s, z, &q));
            if (!sp)
                last = q;
            p = q;
        }
        st = weft_str_add(out, spaced.s + a, last - a);
    }
    weft_str_cleanup(&bytes);
    weft_str_cleanup(&text);
    weft_str_cleanup(&spaced);
    return st == WEFT_OK ? st : weft_error_refuse(err, st, "out of memory");
}
