"""The tokenizer tests' corpus: text in many scripts from a seeded generator.

tests/tokenizer_corpus.cc makes the same bytes from the same seed (the test
checks their CRC-32C against the fixture), so the corpus is never stored.
Integers only, so that both languages agree exactly.
"""

MASK = (1 << 64) - 1


class Rng:
    """splitmix64."""

    def __init__(self, seed):
        self.s = seed & MASK

    def next(self):
        self.s = (self.s + 0x9E3779B97F4A7C15) & MASK
        z = self.s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        return z ^ (z >> 31)

    def below(self, n):
        return self.next() % n


LATIN = [ord(c) for c in "abcdefghijklmnopqrstuvwxyz"] + [0xE9, 0xE8, 0xE0, 0xFC, 0xF6, 0xF1, 0xE7, 0xDF]
# (first code point, count, spaced): the letters of each script's words.
SCRIPTS = [
    (0x0430, 32, True),   # Cyrillic
    (0x03B1, 25, True),   # Greek
    (0x0627, 36, True),   # Arabic
    (0x0915, 37, True),   # Devanagari consonants (vowel signs added below)
    (0xAC00, 11172, True),  # Hangul syllables
    (0x4E00, 512, False),  # CJK ideographs, unspaced
    (0x3041, 83, False),  # Hiragana, unspaced
    (0x0E01, 46, False),  # Thai, unspaced
]
PUNCT = [",", ".", "!", "?", ";", ":", "\u2014", "\u2026", "\u00ab", "\u00bb", "(", ")", "\"", "...", "--", "==",
         "->", "#", "$", "%", "&", "*", "/", "@", "[", "]", "{", "}", "|", "~", "\u3002", "\u3001"]
CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL", "'Ve"]
SPACES = ["  ", "\t", "\u00a0", "\u3000", "\u000b", "\u0085", "\u2028", "   ", " \t "]


def word(rng, script):
    if script < 0:  # Latin, sometimes with a decomposed accent that NFC composes
        w = "".join(chr(LATIN[rng.below(len(LATIN))]) for _ in range(1 + rng.below(9)))
        if rng.below(8) == 0:
            w += chr(0x0301 + rng.below(8))
        return w
    first, count, _ = SCRIPTS[script]
    n = 1 + rng.below(3 if count > 1000 else 6)
    out = []
    for _ in range(n):
        out.append(chr(first + rng.below(count)))
        if first == 0x0915 and rng.below(2) == 0:
            out.append(chr(0x093E + rng.below(15)))
    return "".join(out)


def lexicons(rng):
    """Each script's 300 words, so that words repeat as in real text."""
    return {s: [word(rng, s) for _ in range(300)] for s in range(-1, len(SCRIPTS))}


def sentence(rng, lex):
    script = -1 if rng.below(3) == 0 else rng.below(len(SCRIPTS) + 1) - 1
    spaced = script < 0 or SCRIPTS[script][2]
    parts = []
    for i in range(3 + rng.below(13)):
        r = rng.below(100)
        words = lex[script]
        w = words[(rng.below(len(words)) * rng.below(len(words))) // len(words)]  # skewed to the front
        if script < 0 and rng.below(5) == 0 and "a" <= w[0] <= "z":
            w = chr(ord(w[0]) - 32) + w[1:]
        if r < 8:
            w = str(rng.below(10 ** (1 + rng.below(8))))
        elif r < 12:
            w = PUNCT[rng.below(len(PUNCT))]
        elif r < 14:
            w = chr(0x1F600 + rng.below(80)) + ("\u200d" + chr(0x1F300 + rng.below(256)) if rng.below(3) == 0 else "")
        elif r < 18 and script < 0:
            w += CONTRACTIONS[rng.below(len(CONTRACTIONS))]
        sep = (SPACES[rng.below(len(SPACES))] if rng.below(12) == 0 else " ") if spaced else ""
        parts.append((sep if i else "") + w)
    end = rng.below(20)
    tail = "\n" if end < 12 else "\r\n" if end < 14 else "\n\n" if end < 17 else "  \n" if end < 19 else " "
    return "".join(parts) + PUNCT[rng.below(3) + 1] + tail


def corpus(seed=20261128, min_bytes=1 << 20):
    rng = Rng(seed)
    lex = lexicons(rng)
    out, size = [], 0
    while size < min_bytes:
        s = sentence(rng, lex)
        out.append(s)
        size += len(s.encode("utf-8"))
    return "".join(out)


def crc32c(data):
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
        table.append(c)
    c = 0xFFFFFFFF
    for b in data:
        c = table[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


if __name__ == "__main__":
    import sys
    text = corpus()
    data = text.encode("utf-8")
    print(len(data), hex(crc32c(data)), file=sys.stderr)
    sys.stdout.write(text)
