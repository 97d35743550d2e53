"""Observation groups (observational memory's ``retrieval`` mode): each block of observations is wrapped in
``<observation-group id=… range="firstId:lastId">`` naming the messages it came from, shown to the model as
``## Group`` sections with their ``_range``, carried through reflection; as Mastra 1.71 writes them, so records
move between the two systems unchanged."""

from __future__ import annotations

import re
import secrets
from collections.abc import Sequence

import msgspec

from ..codecs import Message, UnknownPart

__all__ = ("ObservationGroup", "combine_ranges", "message_range", "parse_groups", "reconcile_after_reflection",
           "render_groups", "retrieval_instructions", "wrap_in_group")

_OPEN, _CLOSE = "<observation-group", "</observation-group>"
_ATTRIBUTE = re.compile(r"([\w][\w-]*)=\"([^\"]*)\"")
_SECTION_SPLIT = re.compile(r"^##\s+Group\s+", re.MULTILINE)


class ObservationGroup(msgspec.Struct, frozen=True):
    """One ``<observation-group>``: its id, the message range it came from, its kind, its text."""

    id: str
    range: str
    content: str
    kind: str | None = None


def _visible(message: Message) -> bool:
    parts = message.content.parts
    if not parts:
        return bool(message.content.content)
    return any(not (isinstance(part, UnknownPart) and part.type.startswith("data-")) for part in parts)


def message_range(messages: Sequence[Message]) -> str:
    """``firstId:lastId`` of the first and last messages with visible content (Mastra's ``buildMessageRange``)."""
    first = next((m for m in messages if _visible(m)), messages[0])
    last = next((m for m in reversed(messages) if _visible(m)), messages[-1])
    return f"{first.id}:{last.id}"


def wrap_in_group(observations: str, range_: str, group_id: str | None = None, kind: str | None = None) -> str:
    """``observations`` as one group (a fresh 16-hex id unless given)."""
    kind_attribute = f' kind="{kind}"' if kind else ""
    return (f'<observation-group id="{group_id or secrets.token_hex(8)}" range="{range_}"{kind_attribute}>\n'
            f"{observations.strip()}\n{_CLOSE}")


def _tags(text: str) -> list[tuple[int, int, str, str]]:
    """Complete group tags as (start, end, attribute text, content), in order; unclosed openings are skipped."""
    tags: list[tuple[int, int, str, str]] = []
    cursor = 0
    while True:
        start = text.find(_OPEN, cursor)
        if start < 0:
            break
        attributes_at = start + len(_OPEN)
        if attributes_at >= len(text) or not text[attributes_at].isspace():
            cursor = attributes_at
            continue
        open_end = text.find(">", attributes_at)
        close = text.find(_CLOSE, open_end + 1) if open_end >= 0 else -1
        if close < 0:
            break
        nested = text.find(_OPEN, open_end + 1)
        if 0 <= nested < close:
            cursor = nested
            continue
        tags.append((start, close + len(_CLOSE), text[attributes_at:open_end], text[open_end + 1:close]))
        cursor = close + len(_CLOSE)
    return tags


def parse_groups(text: str) -> list[ObservationGroup]:
    """The groups of an observations text that have an id and a range."""
    groups = []
    for _start, _end, attributes, content in _tags(text or ""):
        values = dict(_ATTRIBUTE.findall(attributes))
        if values.get("id") and values.get("range"):
            groups.append(ObservationGroup(values["id"], values["range"], content.strip(), values.get("kind")))
    return groups


def render_groups(text: str) -> str | None:
    """The observations with each group shown as a ``## Group `id` `` section with its ``_range`` (what the model
    and the Reflector read in retrieval mode); None when there is no group."""
    tags = _tags(text)
    if not any(dict(_ATTRIBUTE.findall(attributes)).get("id") for _s, _e, attributes, _c in tags):
        return None
    out: list[str] = []
    cursor = 0
    for start, end, attributes, content in tags:
        values = dict(_ATTRIBUTE.findall(attributes))
        out.append(text[cursor:start])
        out.append(f"## Group `{values['id']}`\n_range: `{values['range']}`_\n\n{content.strip()}"
                   if values.get("id") and values.get("range") else content.strip())
        cursor = end
    out.append(text[cursor:])
    return re.sub(r"\n{3,}", "\n\n", "".join(out)).strip()


def _endpoints(segment: str) -> tuple[str, str] | None:
    pieces = [piece.strip() for piece in segment.split(":")]
    return (pieces[0], pieces[1]) if len(pieces) == 2 and all(pieces) else None


def combine_ranges(groups: Sequence[ObservationGroup]) -> str:
    """One range spanning the groups' ranges: from the first start to the last end (numeric ids by value)."""
    segments = list(dict.fromkeys(s.strip() for g in groups for s in g.range.split(",") if s.strip()))
    if not segments:
        return ""
    pairs = [_endpoints(segment) for segment in segments]
    if any(pair is None for pair in pairs):
        return ",".join(segments)
    known = [pair for pair in pairs if pair is not None]
    if all(a.isdigit() and b.isdigit() for a, b in known):
        ordered = [(a, b) if int(a) <= int(b) else (b, a) for a, b in known]
        return f"{min(ordered, key=lambda p: int(p[0]))[0]}:{max(ordered, key=lambda p: int(p[1]))[1]}"
    return f"{known[0][0]}:{known[-1][1]}"


def _lines(text: str) -> set[str]:
    return {line.strip() for line in text.split("\n") if line.strip()}


def reconcile_after_reflection(condensed: str, source: str) -> str | None:
    """The Reflector's text as groups again (Mastra's ``reconcileObservationGroupsFromReflection``): each ``## Group``
    section keeps its group's id and the ranges of the groups it drew lines from; a text without sections becomes one
    ``reflection`` group over all the source ranges. None when the source had no group."""
    groups = parse_groups(source)
    if not groups:
        return None
    text = condensed.strip()
    if not text:
        return ""
    sections = [s.strip() for s in _SECTION_SPLIT.split(text) if s.strip()] if _SECTION_SPLIT.search(text) else []
    if not sections:
        return wrap_in_group(text, combine_ranges(groups), kind="reflection")
    out = []
    for index, section in enumerate(sections):
        heading, _, body = section.partition("\n")
        body = re.sub(r"^_range:\s*`[^`]*`_\s*\n?", "", body.strip(), count=1, flags=re.MULTILINE).strip()
        named = re.search(r"`([^`]+)`", heading)
        group_id = named.group(1).strip() if named else f"derived-group-{index + 1}"
        body_lines = _lines(body)
        identified = next((g for g in groups if g.id == group_id), None)
        matching = [g for g in groups if _lines(g.content) & body_lines]
        if identified is not None:
            own = _lines(identified.content)
            sources = [identified, *(g for g in matching
                                     if g is not identified and (_lines(g.content) & body_lines) - own)]
        else:
            sources = matching or [groups[min(index, len(groups) - 1)]]
        out.append(wrap_in_group(body, combine_ranges(sources), group_id, "reflection"))
    return "\n\n".join(out)


def retrieval_instructions(scope: str, custom: str | None, search: bool) -> str:
    """What the model is told of observation groups and the ``recall`` tool (Mastra's retrieval instructions)."""
    resource = scope == "resource"
    if resource and search:
        modes = (
            "### Choosing a mode\nThe recall tool works across ALL of this user's conversation threads, not just the "
            "current one.\n\n"
            '- Use `mode: "search"` with a `query` when you don\'t know which thread contains the answer. Each result '
            "includes its thread ID and the raw message IDs it came from, which you can use as a `cursor`.\n"
            '- Use `mode: "messages"` when you already know the thread — pass `threadId` to read another thread, or a '
            "`cursor` from an observation-group range or a search result.\n"
            '- Use `mode: "threads"` to list the user\'s threads (IDs, titles, dates) when you need to discover where '
            "something was discussed. Use `before`/`after` to narrow by date.\n\n"
            "**If search results look irrelevant, do not give up.** Search only covers content that has been indexed — "
            "a short or recent conversation may exist in raw message history before any observation of it was "
            "created. When search returns nothing suitable but the user is clearly referring to a past conversation, "
            'call `mode: "threads"` to find candidate threads (titles and dates are strong clues), then read them with '
            '`mode: "messages"`. If a search result already gives you a thread ID, go straight to `mode: "messages"`.')
    elif resource:
        modes = (
            "### Choosing a mode\nThe recall tool works across ALL of this user's conversation threads, not just the "
            "current one.\n\n"
            '- Use `mode: "threads"` to list the user\'s threads (IDs, titles, dates) when you need to discover where '
            "something was discussed. Use `before`/`after` to narrow by date.\n"
            '- Use `mode: "messages"` when you know the thread — pass `threadId` to read another thread, or a `cursor` '
            "from an observation-group range.\n\n"
            "When the user refers to a past conversation you don't have a cursor for, call `mode: \"threads\"` to find "
            'candidate threads (titles and dates are strong clues), then read them with `mode: "messages"`. Raw '
            "history may exist for threads that have no observations yet.")
    else:
        modes = ("### Choosing a mode\nThe recall tool is limited to the current conversation thread.\n\n"
                 '- Use `mode: "messages"` (default) to page through this thread\'s message history near a cursor.'
                 + ('\n- Use `mode: "search"` with a `query` to find messages by content within this thread.'
                    if search else "")
                 + '\n- Use `mode: "threads"` to get the current thread\'s ID, title, and dates.')
    other = ("\n- The user references another conversation that your observations don't cover — even if you have no "
             "observations yet, their other threads may contain it") if resource else ""
    not_needed = (
        f"- No relevant observation range exists AND {'`search`/`threads`' if search else '`threads`'} turned up "
        "nothing — but remember that raw history may exist for threads that have no observations yet, so check "
        "before concluding the information is unavailable") if resource else \
        "- There is no relevant range in your observations for the topic"
    base = (
        "## Recall — looking up source messages\n\n"
        "Your memory is comprised of observations which are sometimes wrapped in <observation-group> xml tags "
        'containing ranges like <observation-group range="startId:endId">. These ranges point back to the raw '
        "messages that each observation group was derived from. The original messages are still available — use "
        "the **recall** tool to retrieve them.\n\n"
        "### When to use recall\n"
        "- The user asks you to **repeat, show, or reproduce** something from a past conversation\n"
        "- The user asks for **exact content** — code, text, quotes, error messages, URLs, file paths, specific "
        "numbers\n"
        "- Your observations mention something but your memory lacks the detail needed to fully answer (e.g. you "
        "know a blog post was shared but only have a summary of it)\n"
        f"- You want to **verify or expand on** an observation before responding{other}\n\n"
        "**Default to using recall when the user references specific past content.** Your observations capture the "
        "gist, not the details. If there's any doubt whether your memory is complete enough, use recall.\n\n"
        f"{modes}\n\n"
        "### How to use recall with a cursor\n"
        "Each range has the format `startId:endId` where both are message IDs separated by a colon.\n\n"
        "1. Find the observation group relevant to the user's question and extract the start or end ID from its "
        "range.\n"
        "2. Call `recall` with that ID as the `cursor`.\n"
        "3. Use `page: 1` (or omit) to read forward from the cursor, `page: -1` to read backward.\n"
        "4. If the first page doesn't have what you need, increment the page number to keep paginating.\n"
        "5. Check `hasNextPage`/`hasPrevPage` in the result to know if more pages exist in each direction.\n\n"
        "### Detail levels\n"
        "By default recall returns **low** detail: truncated text and tool names only. Each message shows its ID and "
        "each part has a positional index like `[p0]`, `[p1]`, etc.\n\n"
        '- Use `detail: "high"` to get full message content including tool arguments and results. This will only '
        "return the high detail version of a single message part at a time.\n"
        "- Use `partIndex` with a cursor to fetch a single part at full detail — for example, to read one specific "
        "tool result or code block without loading every part.\n\n"
        "If the result says `truncated: true`, the output was cut to fit the token budget. You can paginate or use "
        "`partIndex` to target specific content. If a single part is itself too large, follow the returned "
        "`nextCharOffset` as described below.\n\n"
        "### Following up on truncated parts\n"
        "Low-detail results may include truncation hints like:\n"
        '`[truncated — call recall cursor="..." partIndex=N detail="high" for full content]`\n\n'
        "**When you see these hints and need the full content, make the exact call described in the hint.** This is "
        "the normal workflow: first recall at low detail to scan, then drill into specific parts at high detail. Do "
        "not stop at the low-detail result if the user asked for exact content.\n\n"
        "If a single part is larger than the token budget, the `partIndex` result is `truncated: true` and includes "
        "`nextCharOffset`. Repeat the same call with `charOffset` set to that exact value to read the next chunk from "
        "where the previous one ended. Keep following `nextCharOffset` until the result no longer includes it — the "
        "chunks together contain the full part. Retrying without `charOffset` returns the same prefix again.\n\n"
        "### When recall is NOT needed\n"
        "- The user is asking for a high-level summary and your observations already cover it\n"
        "- The question is about general preferences or facts that don't require source text\n"
        f"{not_needed}\n\n"
        "Observation groups with range IDs and your recall tool allows you to think back and remember details you're "
        "fuzzy on.")
    custom = (custom or "").strip()
    return f"{base}\n\n### Additional recall guidance\n{custom}" if custom else base
