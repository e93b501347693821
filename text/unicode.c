/* Unicode through utf8proc (see unicode.h). */
#include "text/unicode.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "common/alloc.h"
#include "common/utf8.h"

weft_status_t weft_text_check(const char *s, size_t len, const char *what,
                              struct weft_error *err)
{
    size_t bad = 0;
    if (!weft_utf8_valid(s, len, &bad))
        return weft_error_refuse(err, WEFT_ERR_INVALID, "%s: not valid UTF-8 (byte %zu)", what,
                                 bad);
    const char *nul = memchr(s, '\0', len);
    if (nul)
        return weft_error_refuse(err, WEFT_ERR_INVALID, "%s: holds a NUL character (byte %zu)",
                                 what, (size_t)(nul - s));
    return WEFT_OK;
}

int32_t weft_text_next(const char *s, size_t len, size_t *pos)
{
    utf8proc_int32_t cp = 0;
    utf8proc_ssize_t n = utf8proc_iterate((const utf8proc_uint8_t *)s + *pos,
                                          (utf8proc_ssize_t)(len - *pos), &cp);
    if (n <= 0) { /* not reached on checked text; step one byte rather than loop */
        *pos += 1;
        return 0xFFFD;
    }
    *pos += (size_t)n;
    return cp;
}

size_t weft_text_put(int32_t cp, char *out)
{
    return (size_t)utf8proc_encode_char(cp, (utf8proc_uint8_t *)out);
}

bool weft_text_is_letter(int32_t cp)
{
    utf8proc_category_t c = utf8proc_category(cp);
    return c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LL || c == UTF8PROC_CATEGORY_LT ||
           c == UTF8PROC_CATEGORY_LM || c == UTF8PROC_CATEGORY_LO;
}

bool weft_text_is_number(int32_t cp)
{
    utf8proc_category_t c = utf8proc_category(cp);
    return c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_NO;
}

bool weft_text_is_space(int32_t cp)
{
    if ((cp >= 0x09 && cp <= 0x0D) || cp == 0x85)
        return true;
    utf8proc_category_t c = utf8proc_category(cp);
    return c == UTF8PROC_CATEGORY_ZS || c == UTF8PROC_CATEGORY_ZL || c == UTF8PROC_CATEGORY_ZP;
}

int weft_text_lower(int32_t cp, int32_t out[2])
{
    if (cp == 0x130) {
        out[0] = 'i';
        out[1] = 0x307;
        return 2;
    }
    out[0] = utf8proc_tolower(cp);
    return 1;
}

weft_status_t weft_text_nfc(const char *s, size_t len, char **out_p, size_t *out_len,
                            struct weft_error *err)
{
    utf8proc_uint8_t *dst = NULL;
    utf8proc_ssize_t n = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)len, &dst,
                                      UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    if (n < 0)
        return weft_error_refuse(err, n == UTF8PROC_ERROR_NOMEM ? WEFT_ERR_NOMEM
                                                                 : WEFT_ERR_INVALID,
                                 "text normalisation (NFC): %s", utf8proc_errmsg(n));
    /* utf8proc allocates with malloc; the caller frees with weft_free */
    char *out = weft_malloc((size_t)n + 1);
    if (!out) {
        free(dst); /* NOLINT(cppcoreguidelines-no-malloc): utf8proc's own allocation */
        return weft_error_refuse(err, WEFT_ERR_NOMEM, "out of memory");
    }
    memcpy(out, dst, (size_t)n + 1);
    free(dst); /* NOLINT(cppcoreguidelines-no-malloc) */
    *out_p = out;
    *out_len = (size_t)n;
    return WEFT_OK;
}

bool weft_text_grapheme_break(int32_t a, int32_t b, int32_t *state)
{
    return utf8proc_grapheme_break_stateful(a, b, state);
}
