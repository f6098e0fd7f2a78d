"""Makes tests/fixtures/tokenizers: small tokenizers of the kinds the Llama
family ships, trained here on scripts/tokenizer_corpus.py's text, and the ids
Hugging Face's `tokenizers` gives for that text, for zerod's tokenizer to
equal token for token.

    python3 -m venv venv && venv/bin/pip install tokenizers sentencepiece transformers jinja2 protobuf
    venv/bin/python scripts/tokenizer_fixtures.py tests/fixtures/tokenizers

Kinds: byte-level BPE from tokenizer.json as Llama 3 (its split pattern,
whole words looked up first, a BOS template), Qwen2 (NFC, single digits) and
GPT-2 (ByteLevel's own pattern) write them; a SentencePiece BPE model as
Llama 2 and Mistral's (byte fallback, digits split, a dummy prefix); and that
model as transformers' tokenizer.json holds it (BPE with byte fallback), read
as transformers 5 reads it, with each id's offsets: rebuilt by the class it
reads the file through (LlamaTokenizer: Metaspace, prepending to the text's
start, or with `legacy` to every segment; GemmaTokenizer: spaces replaced,
nothing prepended, on a model trained without the dummy prefix), or as the
file says (Llama 2's hub file, Prepend and Replace normalizers, in Mistral's
hub shape: config.json's model_type "mistral"), and that file under other
configs. The
chat templates are this project's own Jinja for Llama 3's header format and
ChatML, rendered here by transformers. Where transformers' conversion of the
SentencePiece model and sentencepiece itself differ on a case (runs of
leading spaces), both are kept ("reference_ids": sentencepiece's).
"""

import json
import os
import shutil
import sys

import sentencepiece as spm
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import AutoTokenizer, GemmaTokenizer, LlamaTokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tokenizer_corpus import corpus, crc32c  # noqa: E402

LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")
VOCAB = 2500
BLOCK = 4096  # ids a block CRC covers, so that a mismatch is found near where it is

LLAMA3_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}"
    "{{ '<|start_header_id|>' + m['role'] + '<|end_header_id|>\n\n' + m['content'] | trim + '<|eot_id|>' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")
CHATML_TEMPLATE = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")

CASES = [
    "", " ", "   ", "\n", "\r\n\r\n", "a", "Hello world", "  leading and trailing  ", "tabs\tand\vvertical\x0cfeeds",
    "I'm sure they'LL say it's fine, we've", "12345678901 3.14159 1,000,000", "naïve café — résumé",
    "e\u0301 composed by NFC", "\u00a0nbsp\u00a0\u3000ideographic", "line\u2028sep\u0085nel",
    "日本語のテキスト、中文文本。", "한국어 텍스트", "Привет, мир!", "مرحبا بالعالم", "नमस्ते दुनिया",
    "emoji 😀👍🏽 👨\u200d👩\u200d👧", "code: for (int i = 0; i < n; ++i) { x[i] *= 2; }",
    "a<|endoftext|>b", "<|begin_of_text|>twice<|begin_of_text|>", "<|im_start|>user\nhi<|im_end|>\n",
    "\ud7a3\U0010fffd\x7f\x01",
]
CONVERSATIONS = [
    [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4."}],
    [{"role": "system", "content": "You answer briefly."}, {"role": "user", "content": " Trim me \n"},
     {"role": "assistant", "content": "Trimmed: ça va, 日本."}, {"role": "user", "content": "And again?"},
     {"role": "assistant", "content": "Again\n\nand again."}],
]


def trained_bpe(text, split, normalizer, ignore_merges, specials, bos):
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    if normalizer:
        tok.normalizer = normalizer
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=split is None)
    tok.pre_tokenizer = (byte_level if split is None else
                         pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(split), "isolated"), byte_level]))
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(text.splitlines(keepends=True), trainer)
    tok.add_special_tokens(specials)
    if bos:
        tok.post_processor = processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B",
                                                           special_tokens=[(bos, tok.token_to_id(bos))])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def ids_summary(ids):
    data = b"".join(i.to_bytes(4, "little") for i in ids)
    blocks = [crc32c(data[i * 4:(i + BLOCK) * 4]) for i in range(0, len(ids), BLOCK)]
    return {"count": len(ids), "crc32c": crc32c(data), "block_crc32c": blocks, "first": ids[:48]}


def write_expected(out, encode, text, fields, reference=None, extra=(), offsets=None):
    """`reference`: another encoder the corpus must agree with; where it
    differs on a case, its ids are kept beside `encode`'s. `extra`: cases
    besides CASES. `offsets`: each id's byte offsets in a case."""
    data = text.encode("utf-8")
    ids = encode(text, True)
    if reference and reference(text, True) != ids:
        sys.exit(f"{out}: the corpus's ids differ between the two encoders")
    cases = []
    for t in CASES + list(extra):
        case = {"text": t, "ids": encode(t, False), "ids_with_special": encode(t, True)}
        if reference and reference(t, False) != case["ids"]:
            case["reference_ids"] = reference(t, False)
            case["reference_ids_with_special"] = reference(t, True)
        if offsets:
            case["offsets"] = offsets(t)
        cases.append(case)
    expected = {"corpus_bytes": len(data), "corpus_crc32c": crc32c(data), "block": BLOCK,
                "corpus_ids": ids_summary(ids), "cases": cases}
    expected.update(fields)
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump(expected, f, ensure_ascii=True, indent=1)


def chats(out, template):
    tok = AutoTokenizer.from_pretrained(out)
    result = []
    for msgs in CONVERSATIONS:
        text = tok.apply_chat_template(msgs, tokenize=False)
        ids = tok.apply_chat_template(msgs, tokenize=True, return_dict=False)
        result.append({"messages": msgs, "text": text, "ids": list(ids)})
    return {"chats": result}


def make_bpe(root, name, text, split, normalizer, ignore_merges, specials, bos, eos, template):
    out = os.path.join(root, name)
    os.makedirs(out, exist_ok=True)
    tok = trained_bpe(text, split, normalizer, ignore_merges, specials, bos)
    tok.save(os.path.join(out, "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": bos, "eos_token": eos,
              "model_max_length": 131072}
    if template:
        config["chat_template"] = template
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=1)
    write_expected(out, lambda t, special: tok.encode(t, add_special_tokens=special).ids, text,
                   chats(out, template) if template else {})


def make_sentencepiece(root, text):
    out = os.path.join(root, "llama2_sp")
    os.makedirs(out, exist_ok=True)
    train_sentencepiece(out, text, add_dummy_prefix=True, unk_id=0, bos_id=1, eos_id=2, pad_id=-1)
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>",
                   "add_bos_token": True, "add_eos_token": False}, f, indent=1)
    sp = spm.SentencePieceProcessor(model_file=os.path.join(out, "tokenizer.model"))
    hf = LlamaTokenizer.from_pretrained(out)  # converted to a `tokenizers` BPE

    write_expected(out, lambda t, special: hf.encode(t, add_special_tokens=special), text, {},
                   lambda t, special: ([sp.bos_id()] if special else []) + sp.encode(t))


def train_sentencepiece(out, text, **options):
    path = os.path.join(out, "corpus_lines.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    spm.SentencePieceTrainer.train(
        input=path, model_prefix=os.path.join(out, "tokenizer"), model_type="bpe", vocab_size=VOCAB,
        byte_fallback=True, split_digits=True, normalization_rule_name="identity",
        remove_extra_whitespaces=False, allow_whitespace_only_pieces=True, character_coverage=0.9995,
        max_sentence_length=1 << 16, num_threads=2, minloglevel=2, **options)
    os.remove(path)
    os.remove(os.path.join(out, "tokenizer.vocab"))


def byte_offsets(tok, text):
    """tokenizers' offsets of text's ids (characters), in bytes."""
    at = [len(text[:k].encode("utf-8")) for k in range(len(text) + 1)]
    return [[at[b], at[e]] for b, e in tok.backend_tokenizer.encode(text, add_special_tokens=False).offsets]


def read_as(out, name, expected):
    tok = AutoTokenizer.from_pretrained(out)
    if type(tok).__name__ != expected:
        sys.exit(f"{name}: transformers read {out} as {type(tok).__name__}, not {expected}")
    return tok


def write_files(out, tokenizer_json, config, model_config=None):
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "tokenizer.json"), "w") as f:
        json.dump(tokenizer_json, f, ensure_ascii=False)
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=1)
    if model_config:
        with open(os.path.join(out, "config.json"), "w") as f:
            json.dump(model_config, f, indent=1)


def write_converted(root, name, cls, model_dir, config, specials, text, edit=None, model_config=None,
                    reads_as=None, decoder=False, variants=()):
    """`model_dir`'s tokenizer.model converted by transformers' `cls` and
    saved as tokenizer.json (`edit` applied to it), with `config` (and its
    added tokens as added_tokens_decoder where `decoder`) and config.json
    `model_config`; the ids and offsets AutoTokenizer gives from those
    files, special-token cases besides. `variants`: other configs for the
    same tokenizer.json, each with a text and the ids transformers gives."""
    out = os.path.join(root, name)
    converted = cls.from_pretrained(model_dir)
    converted.add_special_tokens({"additional_special_tokens": specials})
    j = json.loads(converted.backend_tokenizer.to_str())
    if edit:
        edit(j)
    if decoder:
        config = dict(config, added_tokens_decoder={str(t["id"]): {k: v for k, v in t.items() if k != "id"}
                                                    for t in j["added_tokens"]})
    write_files(out, j, config, model_config)
    tok = read_as(out, name, reads_as or config["tokenizer_class"])
    bos, eos = config["bos_token"], config["eos_token"]
    extra = [f"{bos}{specials[0]} hi{specials[1]} there{eos}", f"a{eos}b", f"{eos} {bos}  x", f"{specials[0]}\n"]
    done = []
    for v in variants:
        scratch = os.path.join(root, name + "_variant")
        write_files(scratch, j, v["tokenizer_config"], v.get("config"))
        ids = read_as(scratch, name, v["reads_as"]).encode(v["text"], add_special_tokens=False)
        shutil.rmtree(scratch)
        done.append(dict(v, ids=ids))
    write_expected(out, lambda t, special: tok.encode(t, add_special_tokens=special), text,
                   {"variants": done} if done else {}, extra=extra, offsets=lambda t: byte_offsets(tok, t))


def legacy_normalizers(j):
    """Llama 2's tokenizer.json on the hub: a prefix and spaces as normalizers."""
    j["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "\u2581"},
        {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]}
    j["pre_tokenizer"] = None


def make_converted(root, text):
    llama = os.path.join(root, "llama2_sp")
    mistral = ["[INST]", "[/INST]"]
    config = {"tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>",
              "add_bos_token": True, "add_eos_token": False}
    write_converted(root, "mistral_spm", LlamaTokenizer, llama, dict(config, legacy=False), mistral, text,
                    decoder=True)
    write_converted(root, "llama2_spm_legacy", LlamaTokenizer, llama, dict(config, legacy=True), mistral, text,
                    legacy_normalizers)
    # Mistral's hub files: LlamaTokenizer named, but model_type "mistral"
    # makes transformers read the file's own steps. The variants: what else
    # decides the class and the added tokens.
    backend = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>"}
    basic = [{"content": t, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
              "special": True} for t in ["<unk>", "<s>", "</s>"]]
    variants = [
        # a special token the config names is matched whole, and the file's Prepend follows it
        {"tokenizer_config": dict(backend, additional_special_tokens=["ll"]), "text": "Hello", "reads_as":
         "TokenizersBackend"},
        # the class rebuilds: its added tokens are the config's, [INST] among none of them
        {"tokenizer_config": dict(config, added_tokens_decoder={str(k): t for k, t in enumerate(basic)}),
         "text": "[INST]hi [/INST]", "reads_as": "LlamaTokenizer"},
        # model_type "llama" leaves the hub's class, which rebuilds
        {"tokenizer_config": config, "config": {"model_type": "llama"}, "text": "[INST]hi", "reads_as":
         "LlamaTokenizer"},
        # no prefix (add_prefix_space false), with the class's Fast name
        {"tokenizer_config": dict(config, tokenizer_class="LlamaTokenizerFast", add_prefix_space=False),
         "text": "hi there", "reads_as": "LlamaTokenizer"},
        # the class from config.json's tokenizer_class where tokenizer_config.json names none
        {"tokenizer_config": {"bos_token": "<s>", "eos_token": "</s>"},
         "config": {"model_type": "llama", "tokenizer_class": "LlamaTokenizer"}, "text": "[INST]hi",
         "reads_as": "LlamaTokenizer"},
    ]
    write_converted(root, "spm_file_pipeline", LlamaTokenizer, llama, config, mistral, text, legacy_normalizers,
                    model_config={"model_type": "mistral"}, reads_as="TokenizersBackend", variants=variants)

    model = os.path.join(root, "gemma_spm_model")
    os.makedirs(model, exist_ok=True)
    train_sentencepiece(model, text, add_dummy_prefix=False, pad_id=0, eos_id=1, bos_id=2, unk_id=3,
                        pad_piece="<pad>", eos_piece="<eos>", bos_piece="<bos>")
    gemma = {"tokenizer_class": "GemmaTokenizer", "bos_token": "<bos>", "eos_token": "<eos>",
             "pad_token": "<pad>", "add_bos_token": True, "add_eos_token": False}
    write_converted(root, "gemma_spm", GemmaTokenizer, model, gemma, ["<start_of_turn>", "<end_of_turn>"], text)
    shutil.rmtree(model)


def main():
    root = sys.argv[1]
    text = corpus()
    llama3_specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                       "<|eot_id|>"]
    make_bpe(root, "llama3_bpe", text, LLAMA3_SPLIT, None, True, llama3_specials, "<|begin_of_text|>",
             "<|eot_id|>", LLAMA3_TEMPLATE)
    make_bpe(root, "qwen2_bpe", text, QWEN2_SPLIT, normalizers.NFC(), False,
             ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], None, "<|im_end|>", CHATML_TEMPLATE)
    make_bpe(root, "gpt2_bpe", text, None, None, False, ["<|endoftext|>"], None, "<|endoftext|>", None)
    make_sentencepiece(root, text)
    make_converted(root, text)


if __name__ == "__main__":
    main()
