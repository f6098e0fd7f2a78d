"""Makes tests/fixtures/chat_templates: chat templates in the manner of the
formats models ship (Llama 3.1's and 3.2's dated system preamble, Mistral
v0.3's [INST] turns with the system message in the last user turn,
Qwen2.5's default system turn, Gemma's model role), written here, each with
a copy marking the assistant's turns with {% generation %}; and, for 60
generated conversations each, the ids transformers' apply_chat_template
gives and the mask its return_assistant_tokens_mask gives on the marked
copy, for zerod's rendering to equal.

    python3 -m venv venv && venv/bin/pip install tokenizers transformers jinja2
    venv/bin/python scripts/chat_template_fixtures.py tests/fixtures

Reads the tokenizers of tests/fixtures/tokenizers (tokenizer_fixtures.py);
Mistral's and Gemma's markers are added to copies of two byte-level ones,
and the SentencePiece-style ones have them.
"""

import datetime
import json
import os
import random
import sys

from tokenizers import Tokenizer
from transformers import AutoTokenizer
import transformers.utils.chat_template_utils as chat_template_utils

DATE = datetime.datetime(2025, 3, 14)  # what strftime_now() gives here and in the test


class FixedDate(datetime.datetime):
    @classmethod
    def now(cls, tz=None):
        return DATE


chat_template_utils.datetime = FixedDate

# {#G#} and {#/G#} are comments, which the marked copy makes
# {% generation %} and {% endgeneration %}.
LLAMA31 = """{{- bos_token }}
{%- if not date_string is defined %}
    {%- set date_string = "26 Jul 2024" %}
{%- endif %}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] | trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}
{{- "Cutting Knowledge Date: December 2023\\n" }}
{{- "Today Date: " + date_string + "\\n\\n" }}
{{- system_message }}
{{- "<|eot_id|>" }}
{%- for message in messages %}
    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}
    {%- if message['role'] == 'assistant' %}{#G#}{{ message['content'] | trim + '<|eot_id|>' }}{#/G#}
    {%- else %}{{ message['content'] | trim + '<|eot_id|>' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
"""

LLAMA32 = LLAMA31.replace("""{%- if not date_string is defined %}
    {%- set date_string = "26 Jul 2024" %}
{%- endif %}""", """{%- if not date_string is defined %}
    {%- if strftime_now is defined %}
        {%- set date_string = strftime_now("%d %b %Y") %}
    {%- else %}
        {%- set date_string = "26 Jul 2024" %}
    {%- endif %}
{%- endif %}""")

MISTRAL = """{%- if messages[0]["role"] == "system" %}
    {%- set system_message = messages[0]["content"] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}
{%- set ns = namespace(last_user=-1) %}
{%- for message in loop_messages %}
    {%- if (message["role"] == "user") != (loop.index0 % 2 == 0) %}
        {{- raise_exception("roles must alternate user, assistant, user... after an optional system message") }}
    {%- endif %}
    {%- if message["role"] == "user" %}
        {%- set ns.last_user = loop.index0 %}
    {%- endif %}
{%- endfor %}
{{- bos_token }}
{%- for message in loop_messages %}
    {%- if message["role"] == "user" %}
        {%- if loop.index0 == ns.last_user and system_message is defined %}
            {{- "[INST] " + system_message + "\\n\\n" + message["content"] + "[/INST]" }}
        {%- else %}
            {{- "[INST] " + message["content"] + "[/INST]" }}
        {%- endif %}
    {%- else %}
        {#G#}{{- " " + message["content"] | trim + eos_token }}{#/G#}
    {%- endif %}
{%- endfor %}
"""

QWEN25 = """{%- if messages[0]['role'] == 'system' %}
    {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
{%- else %}
    {{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
    {%- if message.role == "assistant" %}
        {{- '<|im_start|>assistant\\n' }}{#G#}{{ message.content + '<|im_end|>' }}{#/G#}{{ '\\n' }}
    {%- elif message.role == "user" or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""

GEMMA = """{{- bos_token }}
{%- if messages[0]['role'] == 'system' %}
    {%- set first_user_prefix = messages[0]['content'] + '\\n\\n' %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set first_user_prefix = "" %}
    {%- set loop_messages = messages %}
{%- endif %}
{%- for message in loop_messages %}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}
        {{- raise_exception("roles must alternate user, assistant, user...") }}
    {%- endif %}
    {%- if message['role'] == 'assistant' %}
        {{- '<start_of_turn>model\\n' }}{#G#}{{ message['content'] | trim + '<end_of_turn>' }}{#/G#}{{ '\\n' }}
    {%- else %}
        {{- '<start_of_turn>' + message['role'] + '\\n' + (first_user_prefix if loop.first else '') }}
        {{- message['content'] | trim + '<end_of_turn>\\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<start_of_turn>model\\n' }}
{%- endif %}
"""

# name: (template, base tokenizer, tokens added to a copy of it, bos, eos)
FORMATS = {
    "llama31": (LLAMA31, "llama3_bpe", [], "<|begin_of_text|>", "<|eot_id|>"),
    "llama32": (LLAMA32, "llama3_bpe", [], "<|begin_of_text|>", "<|eot_id|>"),
    "mistral_v03": (MISTRAL, "gpt2_bpe", ["<s>", "</s>", "[INST]", "[/INST]"], "<s>", "</s>"),
    "qwen25": (QWEN25, "qwen2_bpe", [], None, "<|im_end|>"),
    "gemma": (GEMMA, "qwen2_bpe", ["<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>"], "<bos>", "<eos>"),
    # SentencePiece-style BPE in tokenizer.json, as transformers reads it.
    "mistral_v03_spm": (MISTRAL, "mistral_spm", [], "<s>", "</s>"),
    "mistral_v03_spm_legacy": (MISTRAL, "llama2_spm_legacy", [], "<s>", "</s>"),
    "mistral_v03_spm_file": (MISTRAL, "spm_file_pipeline", [], "<s>", "</s>"),
    "gemma_spm": (GEMMA, "gemma_spm", [], "<bos>", "<eos>"),
}

PIECES = ["What is 2+2?", "4.", " Trim me \n", "ça va, 日本語のテキスト。", "emoji 😀👍🏽 👨\u200d👩\u200d👧",
          "e\u0301 composed by NFC", "Line one\nline two\n\n", "Привет, мир!", "code: x[i] *= 2;",
          "a <b> & 'single' \"double\"", "\ttabbed\tout", "12345 3.14159", "  two leading", "한국어", "मौसम",
          "The answer is 42.", "Sure.\n\n1. first\n2. second", "naïve café — résumé", "OK", "?"]


def content(rng):
    if rng.random() < 0.1:
        return ""  # an empty turn
    return rng.choice(["", " ", "\n"]).join(rng.choice(PIECES) for _ in range(rng.randint(1, 3)))


def conversations(seed, count):
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        msgs = [{"role": "system", "content": content(rng)}] if rng.random() < 0.4 else []
        for _ in range(rng.randint(1, 4)):
            msgs += [{"role": "user", "content": content(rng)}, {"role": "assistant", "content": content(rng)}]
        out.append(msgs)
    return out


def tokenizer_dir(root, name, base, added, bos, eos):
    src = os.path.join(root, "tokenizers", base)
    if not added:
        return src
    out = os.path.join(root, "chat_templates", name + "_tokenizer")
    os.makedirs(out, exist_ok=True)
    tok = Tokenizer.from_file(os.path.join(src, "tokenizer.json"))
    tok.add_special_tokens(added)
    tok.save(os.path.join(out, "tokenizer.json"))
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": bos, "eos_token": eos,
                   "model_max_length": 131072}, f, indent=1)
    return out


def main():
    root = sys.argv[1]
    for seed, (name, (template, base, added, bos, eos)) in enumerate(FORMATS.items()):
        tok_dir = tokenizer_dir(root, name, base, added, bos, eos)
        tok = AutoTokenizer.from_pretrained(tok_dir)
        tagged = template.replace("{#G#}", "{% generation %}").replace("{#/G#}", "{% endgeneration %}")
        cases = []
        for msgs in conversations(seed, 60):
            text = tok.apply_chat_template(msgs, chat_template=template, tokenize=False)
            if tok.apply_chat_template(msgs, chat_template=tagged, tokenize=False) != text:
                sys.exit(f"{name}: the marked template renders another text")
            ids = list(tok.apply_chat_template(msgs, chat_template=template, tokenize=True, return_dict=True)
                       ["input_ids"])
            marked = tok.apply_chat_template(msgs, chat_template=tagged, tokenize=True, return_dict=True,
                                             return_assistant_tokens_mask=True)
            if list(marked["input_ids"]) != ids:
                sys.exit(f"{name}: the marked template gives other ids")
            cases.append({"messages": msgs, "text": text, "ids": ids, "mask": list(marked["assistant_masks"])})
        out = os.path.join(root, "chat_templates", name)
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "template.jinja"), "w") as f:
            f.write(template)
        with open(os.path.join(out, "tagged.jinja"), "w") as f:
            f.write(tagged)
        with open(os.path.join(out, "cases.json"), "w") as f:
            json.dump({"tokenizer": os.path.relpath(tok_dir, root), "date": DATE.strftime("%Y-%m-%d"),
                       "cases": cases}, f, ensure_ascii=True, indent=0)


if __name__ == "__main__":
    main()
