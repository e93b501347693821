// The C face of libsentencepiece (spm_shim.h).
#include "text/spm_shim.h"

#include <sentencepiece_processor.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

struct weft_spm {
    sentencepiece::SentencePieceProcessor proc;
};

static void put_msg(char *msg, size_t mlen, const std::string &s)
{
    if (mlen)
        std::snprintf(msg, mlen, "%s", s.c_str());
}

extern "C" int weft_spm_load(const void *proto, size_t len, struct weft_spm **spm_p, char *msg,
                             size_t mlen)
{
    try {
        std::unique_ptr<weft_spm> s(new weft_spm);
        auto st = s->proc.LoadFromSerializedProto(
            std::string_view(static_cast<const char *>(proto), len));
        if (!st.ok()) {
            put_msg(msg, mlen, st.ToString());
            return 1;
        }
        *spm_p = s.release();
        return 0;
    } catch (const std::bad_alloc &) {
        put_msg(msg, mlen, "out of memory");
        return -1;
    } catch (...) {
        put_msg(msg, mlen, "sentencepiece failed to load the model");
        return 1;
    }
}

extern "C" void weft_spm_free(struct weft_spm *spm)
{
    delete spm;
}

extern "C" int weft_spm_size(const struct weft_spm *spm)
{
    return spm->proc.GetPieceSize();
}

extern "C" const char *weft_spm_piece(const struct weft_spm *spm, int id, size_t *len_p)
{
    const std::string &p = spm->proc.IdToPiece(id);
    *len_p = p.size();
    return p.c_str();
}

extern "C" int weft_spm_type(const struct weft_spm *spm, int id)
{
    if (spm->proc.IsUnknown(id))
        return WEFT_SPM_UNKNOWN;
    if (spm->proc.IsControl(id))
        return WEFT_SPM_CONTROL;
    if (spm->proc.IsUnused(id))
        return WEFT_SPM_UNUSED;
    if (spm->proc.IsByte(id))
        return WEFT_SPM_BYTE;
    return WEFT_SPM_NORMAL; /* user-defined pieces are not told apart by the public API */
}

extern "C" int weft_spm_encode(const struct weft_spm *spm, const char *text, size_t len,
                               int32_t **ids_p, size_t *n_p, char *msg, size_t mlen)
{
    try {
        std::vector<int> ids;
        auto st = spm->proc.Encode(std::string_view(text, len), &ids);
        if (!st.ok()) {
            put_msg(msg, mlen, st.ToString());
            return 1;
        }
        int32_t *out = static_cast<int32_t *>(std::malloc((ids.size() + 1) * sizeof(int32_t)));
        if (!out)
            return -1;
        for (size_t i = 0; i < ids.size(); i++)
            out[i] = ids[i];
        *ids_p = out;
        *n_p = ids.size();
        return 0;
    } catch (const std::bad_alloc &) {
        return -1;
    } catch (...) {
        put_msg(msg, mlen, "sentencepiece failed to encode");
        return 1;
    }
}
