"""Renders chat templates for zeroctl tokenize (chat_template.h), as
transformers' apply_chat_template renders them: Jinja itself, in its
immutable sandbox, with trim_blocks, lstrip_blocks and loop controls, the
tokenizer's special tokens as variables, and transformers' globals
(raise_exception, strftime_now, namespace, dict) and tojson filter.

One JSON object a line on stdin, one reply a line on stdout:
  {"template", "variables", "date", "roles"}  ->  {"generation": bool}, {"error"} or {"fatal"}
  {"messages": [...]}                         ->  {"text", "spans"} or {"error"}
"spans" are the trained parts of "text" as UTF-8 byte ranges, in the
text's order and apart:
with roles ["assistant"] and a template that marks {% generation %}, what
those blocks wrote (transformers' assistant mask); else, for each message
of a trained role, the part of the text its content decides (found by
rendering the conversation again with that content replaced), an
assistant's from the whitespace its turn writes before the content on
(what the model generates after the generation prompt, which ends where
add_generation_prompt's text ends).
"""

import copy
import json
import re
import sys
from datetime import datetime

SENTINEL = "\ue000zerod\ue001"  # private-use characters no template writes


def reply(obj):
    sys.stdout.write(json.dumps(obj, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def where(e):
    line = getattr(e, "lineno", None)
    return f"line {line}: " if line else ""


def environment(jinja2, date):
    from jinja2 import nodes
    from jinja2.ext import Extension
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(Extension):
        """{% generation %}...{% endgeneration %}: records where its output lands."""

        tags = {"generation"}
        spans = None  # the render's [blocks, spans] while one tracks them

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return nodes.CallBlock(self.call_method("_track"), [], [], body).set_lineno(lineno)

        def _track(self, caller):
            out = caller()
            if Generation.spans is not None:
                blocks, spans = Generation.spans
                start = sum(len(b) for b in blocks)
                spans.append((start, start + len(out)))
            return out

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        when = datetime.strptime(date, "%Y-%m-%d") if date else datetime.now()
        return when.strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, "jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals.update(raise_exception=raise_exception, strftime_now=strftime_now, namespace=jinja2.utils.Namespace,
                       dict=dict)
    return env, Generation


def byte_offsets(text):
    """The UTF-8 byte offset of each character index, and of the end."""
    out = [0]
    for ch in text:
        out.append(out[-1] + len(ch.encode("utf-8", "surrogatepass")))
    return out


def main():
    # UTF-8 whatever the locale: the offsets are UTF-8's.
    sys.stdin.reconfigure(encoding="utf-8")
    sys.stdout.reconfigure(encoding="utf-8")
    try:
        import jinja2
    except ImportError as e:
        reply({"fatal": f"{sys.executable} has no jinja2 ({e}); on Debian: apt-get install python3-jinja2"})
        return
    setup = json.loads(sys.stdin.readline())
    env, generation = environment(jinja2, setup.get("date"))
    try:
        template = env.from_string(setup["template"])
    except jinja2.exceptions.TemplateSyntaxError as e:
        reply({"error": f"{where(e)}{e.message}"})
        return
    roles = setup["roles"]
    # Where the template marks {% generation %}, as transformers looks for it.
    tagged = roles == ["assistant"] and re.search(r"\{%-?\s*generation\s*-?%\}", setup["template"]) is not None
    reply({"generation": tagged})
    variables = setup["variables"]

    def context(messages, prompt=False):
        """What apply_chat_template passes the template."""
        return dict(messages=messages, tools=None, documents=None, add_generation_prompt=prompt, **variables)

    def render(messages, prompt=False):
        return template.render(**context(messages, prompt))

    def header_spaces(messages, k):
        """The whitespace that ends the generation prompt before message k:
        what add_generation_prompt adds after messages[:k], trailing."""
        try:
            before, prompt = render(messages[:k]), render(messages[:k], True)
        except Exception:
            return None  # no prompt to compare with: none of the whitespace is the turn's
        added = prompt[len(before):] if prompt.startswith(before) else ""
        return len(added) - len(added.rstrip())

    for line in sys.stdin:
        messages = json.loads(line)["messages"]
        try:
            if tagged:
                blocks, spans = [], []
                generation.spans = (blocks, spans)
                try:
                    for block in template.generate(**context(messages)):
                        blocks.append(block)
                finally:
                    generation.spans = None
                text = "".join(blocks)
            else:
                text = render(messages)
                spans = []
                for k, m in enumerate(messages):
                    if m.get("role") not in roles:
                        continue
                    other = copy.deepcopy(messages)
                    other[k]["content"] = SENTINEL
                    alt = render(other)
                    if alt == text:
                        continue  # the template does not write this content
                    p = 0
                    while p < min(len(text), len(alt)) and text[p] == alt[p]:
                        p += 1
                    s = 0
                    while s < min(len(text), len(alt)) - p and text[-1 - s] == alt[-1 - s]:
                        s += 1
                    begin = p
                    if m.get("role") == "assistant":
                        # Whitespace the turn writes before its content (Mistral's " " after [/INST])
                        # is generated too; the generation prompt's own (a header's "\n\n") is not.
                        j = p
                        while j > 0 and text[j - 1].isspace():
                            j -= 1
                        header = header_spaces(messages, k)
                        begin = p if header is None else j + min(header, p - j)
                    spans.append((begin, len(text) - s))
            # In the text's order, overlaps joined: a template may write a message elsewhere
            # than its turn (Mistral's system message in the last user turn).
            merged = []
            for a, b in sorted(spans):
                if merged and a <= merged[-1][1]:
                    merged[-1][1] = max(merged[-1][1], b)
                else:
                    merged.append([a, b])
            at = byte_offsets(text)
            reply({"text": text, "spans": [[at[a], at[b]] for a, b in merged]})
        except jinja2.exceptions.TemplateError as e:
            reply({"error": f"{where(e)}{e}"})
        except Exception as e:  # the template's own failure on this conversation: a type error, a bad index
            reply({"error": f"{type(e).__name__}: {e}"})


main()
