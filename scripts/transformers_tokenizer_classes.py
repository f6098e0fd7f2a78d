"""Prints the tables of runtime/tokenize/transformers_class.cc from the
installed transformers: which model types AutoTokenizer reads through the
tokenizer file's own steps (their registered class is a backend), which are
registered to a class that rebuilds a byte-fallback BPE (LlamaTokenizer,
GemmaTokenizer) or to another class, and which it reads through their
registered class whatever the hub's class says.

    venv/bin/python scripts/transformers_tokenizer_classes.py
"""

from transformers.models.auto.tokenization_auto import (MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS,
                                                        TOKENIZER_MAPPING_NAMES)

BACKENDS = {"TokenizersBackend", "PythonBackend", "PreTrainedTokenizerFast", "MistralCommonBackend"}


def table(name, names):
    print(f"constexpr std::string_view {name}[] = {{")
    line = "   "
    items = sorted(names)  # in std::string_view's order too: binary-searched
    for k, n in enumerate(items):
        item = f' "{n}"' + ("," if k + 1 < len(items) else "")
        if len(line) + len(item) > 116:
            print(line)
            line = "   "
        line += item
    print(line)
    print("};")


registered = {k: (v or "").removesuffix("Fast") for k, v in TOKENIZER_MAPPING_NAMES.items() if v}
table("kFileSteps", [k for k, v in registered.items() if v in BACKENDS])
for cls in ("LlamaTokenizer", "GemmaTokenizer"):
    table(f"k{cls.removesuffix('Tokenizer')}Types", [k for k, v in registered.items() if v == cls])
table("kOtherClass", [k for k, v in registered.items() if v not in BACKENDS | {"LlamaTokenizer", "GemmaTokenizer"}])
table("kHubClassIgnored", MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS)
