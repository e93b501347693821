/* SHA-256 against FIPS 180-4 examples, HMAC-SHA256 against RFC 4231 test cases. */
#include <stdio.h>
#include <string.h>

#include "common/sha256.h"
#include "test.h"

static void hex(const uint8_t *d, char *out)
{
    for (int i = 0; i < 32; i++)
        sprintf(out + 2 * i, "%02x", d[i]);
}

static void check(const uint8_t *got, const char *want)
{
    char h[65];
    hex(got, h);
    if (strcmp(h, want) != 0) {
        fprintf(stderr, "got %s want %s\n", h, want);
        CHECK(0);
    }
}

int main(void)
{
    uint8_t d[32];
    weft_sha256("abc", 3, d);
    check(d, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    weft_sha256("", 0, d);
    check(d, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    weft_sha256(two, strlen(two), d);
    check(d, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    /* a million 'a', fed in uneven pieces */
    struct weft_sha256 s;
    weft_sha256_init(&s);
    char a[1001];
    memset(a, 'a', sizeof(a));
    for (int i = 0; i < 1000; i++)
        weft_sha256_update(&s, a, i % 2 ? 999 : 1001);
    weft_sha256_final(&s, d);
    check(d, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");

    /* RFC 4231 cases 1, 2 and 6 (key longer than a block) */
    uint8_t k1[20];
    memset(k1, 0x0b, sizeof(k1));
    weft_hmac_sha256(k1, 20, "Hi There", 8, d);
    check(d, "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
    weft_hmac_sha256("Jefe", 4, "what do ya want for nothing?", 28, d);
    check(d, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    uint8_t k6[131];
    memset(k6, 0xaa, sizeof(k6));
    const char *m6 = "Test Using Larger Than Block-Size Key - Hash Key First";
    weft_hmac_sha256(k6, sizeof(k6), m6, strlen(m6), d);
    check(d, "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
    CHECK(weft_ct_compare("abcd", "abcd", 4) == 0);
    CHECK(weft_ct_compare("abcd", "abce", 4) != 0);
    return 0;
}
