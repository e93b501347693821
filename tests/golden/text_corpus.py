"""The tokenizer parity corpus (imported by make_tokenizers.py; not a script).

At least 300 strings, every class a prompt may hold: empty and whitespace only, ordinary prompts,
contractions, punctuation runs, digits in several scripts, accents composed and decomposed (NFC must
compose them), compatibility characters (NFKC for T5), CJK and other scripts, emoji (modifiers, ZWJ
sequences, flags, keycaps), mixed scripts, HTML entities and markup (tokenized as text: transformers'
CLIPTokenizer does not unescape them), control and format characters, the special tokens' own text,
long runs (truncation at CLIP's 77 and T5's 512 and around both), and deterministic random strings.
INVALID holds byte strings that are not UTF-8 text weft takes (each is refused with a clear error);
NUL is among them: a prompt is a C string and the job API refuses \\u0000.
"""

import random

def corpus():
    c = []
    add = c.append
    # empty and whitespace only
    for s in ["", " ", "  ", "\t", "\n", "\r\n", " \t\n ", "\u00a0", "\u3000", "\u2003\u2009", "\u1680",
              "\u0085", "\u2028", "\u2029", "\u202f\u205f", "\x0b\x0c", "   \n\n\t  "]:
        add(s)
    # ordinary prompts
    for s in ["a photo of a cat", "A photo of a cat", "A PHOTO OF A CAT", "a red fox in the snow, 4k, highly detailed",
              "an astronaut riding a horse on mars, digital art", "portrait of a woman, oil on canvas, by Rembrandt",
              "Lighthouse at dusk; waves crashing -- cinematic lighting.", "city at night",
              "  leading and trailing spaces  ", "multiple   spaces\tand\ttabs\nand newlines",
              "cat", "Cat", "CAT", "cats", "cat's", "the cat's hat", "x", "I", "a", "z"]:
        add(s)
    # contractions
    for s in ["it's", "don't", "we're", "they've", "I'm", "you'll", "he'd", "IT'S", "DON'T", "We'Re",
              "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "''s", "'''", "it''s", "rock'n'roll", "o'clock",
              "’s curly apostrophe", "l'été", "ma'am", "y'all'd've"]:
        add(s)
    # punctuation runs
    for s in ["!!!", "?!?!", "...", "…", "a...b", "hello, world!", "(parenthesis)", "[brackets]", "{braces}",
              "<angle>", "a--b", "a—b–c", "\"quoted\"", "“smart quotes”", "«guillemets»", "#hashtag", "@mention",
              "$100", "100%", "a+b=c", "x^2", "~tilde~", "`backtick`", "back\\slash", "forward/slash", "pipe|pipe",
              "under_score", "semi;colon:colon", "*stars*", "&&", "||", "::", "->", "=>", "<<>>", "!@#$%^&*()_+-=",
              ",,,,,,,,,,", ". . . . .", "¡Hola!", "¿Qué?", "§¶†‡", "©®™", "°C", "±×÷", "½¼¾", "€£¥₹"]:
        add(s)
    # digits
    for s in ["0", "1234567890", "3.14159", "1,000,000", "2024-01-01", "12:30", "4k", "8K UHD", "1080p",
              "v1.2.3", "0x1F", "1e-5", "-42", "+7", "٣٤٥", "١٢٣", "१२३", "一二三", "①②③", "Ⅻ", "²³", "𝟙𝟚𝟛"]:
        add(s)
    # accents: composed, decomposed (NFC must compose), and others
    for s in ["café", "cafe\u0301", "naïve", "nai\u0308ve", "Ångström", "A\u030angstro\u0308m", "São Paulo",
              "Crème brûlée", "Zürich", "Łódź", "Dvořák", "Ñandú", "œuvre", "Æsir", "straße", "STRASSE",
              "ǅ", "ǈ", "İstanbul", "ıi", "ΣΑΣ", "ὈΔΥΣΣΕΎΣ", "e\u0301\u0301", "\u0301", "a\u0300\u0316",
              "ﬁ ligature", "ﬀ", "Ⓐⓑ", "ｆｕｌｌｗｉｄｔｈ", "ＡＢＣ１２３", "ｶﾀｶﾅ", "㎏㎞", "ℌℑ", "ℕ", "Å", "Ω"]:
        add(s)
    # CJK and other scripts
    for s in ["東京", "東京の夜景はとてもきれいです。", "一只猫坐在窗台上", "한국어 문장입니다", "ひらがな", "カタカナ",
              "漢字かなカナ混じり", "中文，标点。", "「括弧」", "Привет, мир!", "Москва", "Γειά σου κόσμε",
              "שלום עולם", "مرحبا بالعالم", "नमस्ते दुनिया", "สวัสดีชาวโลก", "ሰላም", "Բարեւ", "ქართული",
              "தமிழ்", "ಕನ್ನಡ", "ພາສາລາວ", "မြန်မာ", "ខ្មែរ", "ᚠᚢᚦ", "𐍈", "𓀀", "ꙮ"]:
        add(s)
    # emoji
    for s in ["😀", "🐱", "a cat 🐱 on a mat", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇫🇷🇯🇵", "❤️", "❤", "☃", "⭐️⭐️⭐️",
              "🔥🔥🔥🔥🔥", "🧑‍🚀 astronaut", "1️⃣", "#️⃣", "©️", "🫠", "🦊fox", "fox🦊", "😀😃😄😁😆😅"]:
        add(s)
    # mixed scripts
    for s in ["Tokyo 東京 Tōkyō", "Москва Moscow", "αβγ abc", "abc中文def", "Zürich 苏黎世 Цюрих", "CJK漢字123ABC",
              "русский English 日本語 العربية", "mixed-ΑΒΓ-абв-abc", "hello世界", "日本語のtext", "x²+y²=z²",
              "naïve café 東京 🐱", "Ünïcödé ẗëxẗ", "a\u200db", "a\u200bb", "a\u200cb", "\ufeffbom", "a\u00adb"]:
        add(s)
    # HTML entities and markup
    for s in ["&amp;", "&lt;b&gt;bold&lt;/b&gt;", "&quot;quoted&quot;", "&#39;apos&#39;", "&#x27;", "&nbsp;",
              "Tom &amp; Jerry", "<b>bold</b>", "<div class=\"x\">text</div>", "a &copy; b", "&eacute;t&eacute;",
              "&#128049;", "&unknown;", "<br/>", "<!-- comment -->"]:
        add(s)
    # control characters (no NUL: a C string cannot hold one)
    for s in ["a\x01b", "\x07bell", "tab\tsep", "a\x1bb", "del\x7f", "\x1f\x1e", "line\x0bfeed", "form\x0cfeed",
              "cr\rlf", "a\x85b", "a\x9fb", "a\u2028b", "a\u2029b", "a\ufffdb", "\ufffd", "a\u200eb\u200f",
              "a\u2066b\u2069", "\ue000private", "\U000f0000", "a\U0001d173b"]:
        add(s)
    # special-token text
    for s in ["<|startoftext|>", "<|endoftext|>", "a <|endoftext|> b", "<|ENDOFTEXT|>", "x<|startoftext|>y",
              "<|endoftext|><|endoftext|>", "<|endoftext", "endoftext|>", "</s>", "a</s>b", "<pad>", "<unk>",
              "<extra_id_0>", "<extra_id_99>", "<extra_id_100>", "x<extra_id_5>y", "</S>", "< /s>", "<s>"]:
        add(s)
    # words the BPE merges heavily / rarely
    for s in ["antidisestablishmentarianism", "supercalifragilisticexpialidocious", "pneumonoultramicroscopicsilicovolcanoconiosis",
              "aaaaaaaaaaaaaaaaaaaa", "abababababababab", "qwertyuiop", "zzz", "xyzzy", "wwwwww", "Mississippi",
              "photorealistic", "unreal engine", "octane render", "trending on artstation", "bokeh", "hyperdetailed",
              "greg rutkowski", "studio ghibli", "cyberpunk", "steampunk"]:
        add(s)
    # long: truncation at 77 (CLIP) and 512 (T5), and around the limits
    words = ("a photo of a red fox sitting in the snow under a starry night sky with mountains in the "
             "background highly detailed digital painting").split()
    for n in (60, 70, 73, 74, 75, 76, 77, 78, 80, 100, 150, 300, 400, 500, 510, 511, 512, 513, 600, 1000):
        add(" ".join(words[i % len(words)] for i in range(n)))
    add("x" * 5000)
    add("ab " * 3000)
    add("🐱" * 200)
    add("東京" * 300)
    add("!" * 1000)
    add(" " * 2000 + "end")
    # deterministic random strings over a mixed alphabet
    rng = random.Random(1234)
    alphabet = ("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 ,.!?'\"-()\t\n"
                "éèêëàâäôöûüçñßøåæœ東京日本語中文한국어Привет мирΓειάשלוםمرحبा😀🐱👍🏽‍️\u0301\u00a0\u3000")
    for i in range(60):
        n = rng.randint(1, 120)
        add("".join(rng.choice(alphabet) for _ in range(n)))
    return c

# invalid UTF-8 (each a clear error)
INVALID = [b"\xff", b"abc\x80", b"\xc3", b"\xc3\x28", b"\xe2\x82", b"\xed\xa0\x80", b"\xf4\x90\x80\x80",
           b"\xc0\xaf", b"\xe0\x80\xaf", b"\xf8\x88\x80\x80\x80", b"caf\xe9", b"\xfe\xfe\xff\xff",
           b"ok \xf0\x9f\x98", b"\x80\x80\x80", b"a\x00b"]
