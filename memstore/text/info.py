"""Recognise content-free chat messages: acknowledgements, pleasantries, emoji.

Chat transcripts are full of replies such as "Noted.", "Got it 👍", "ok" or
"Thanks for sharing!". They say nothing about the user, yet they are short
(BM25 favours short documents), generic (e5 puts short generic texts near
every query) and sit next to every fact (so neighbour scoring lifts them).
Search ranks such messages after every message with content, and does not
let them take part in neighbour scoring.

A message is low-information when, after an optional leading speaker label
("Bob: ..."), it has no word outside a small closed vocabulary of function
words and phatic words, and at most :data:`MAX_WORDS` words. Everything else
counts as content, including bare "yes"/"no" (an answer to a question is
information) and any number or name. The vocabulary is closed on purpose: it
names what carries no topic, so an unknown word is always treated as content.
"""

from __future__ import annotations

import re

from memstore.text.cjk import CJK_CHAR_CLASS, cjk_runs
from memstore.text.fts import STOP_WORDS

__all__ = ["MAX_WORDS", "PHATIC_WORDS", "is_low_information", "is_small_talk"]

MAX_WORDS = 12
"""Longer messages are never filler, whatever their words: a long run of
pleasantries is rare, and a wrongly demoted message costs more than a kept one."""

_PHATIC_TEXT = """
    ok okay okey k kk oki okie alright right sure fine cool great nice good awesome
    lovely perfect wonderful fantastic amazing excellent super neat sweet brilliant
    interesting wow whoa oh ah aw aww ooh yay hooray haha hahaha hah hehe lol lmao rofl
    hmm hm mm mmm uh um er oops ugh phew thanks thank thx ty tysm cheers appreciate
    appreciated welcome pleasure np noted note got gotcha understood understand see
    know knew heard hear glad happy help helping helped keep mind makes make sense
    sharing share shared letting let tell telling told hello hi hey hiya bye
    goodbye later morning night evening afternoon day have having nice take care
    indeed absolutely definitely totally exactly true agreed agree course sounds sound
    seems really just well much lot many all one anytime again soon talk chat
    congrats congratulations sorry apologies please
    """
PHATIC_WORDS: frozenset[str] = frozenset(_PHATIC_TEXT.split())
"""Words that carry no topic in a chat reply (on top of the search stop words)."""

# Stop words for search, but an answer in a chat: "No." or "Not really" says something.
_ANSWER_WORDS = frozenset({"yes", "yeah", "yep", "yup", "no", "nope", "nah", "not", "never"})
FILLER_WORDS = (PHATIC_WORDS | STOP_WORDS) - _ANSWER_WORDS

# Chinese, Japanese and Korean acknowledgements, matched as whole CJK runs.
_PHATIC_CJK_TEXT = """
    好 好的 好滴 好嘞 好吧 好哒 嗯 嗯嗯 嗯呢 哦 噢 哈哈 哈哈哈 呵呵 嘿嘿
    谢谢 谢谢你 谢谢您 多谢 感谢 收到 知道了 明白 明白了 了解 了解了 懂了
    行 可以 没问题 不客气 不用谢 好的谢谢 好的收到 太好了 真棒 厉害
    はい ええ うん 了解です 了解しました わかりました 分かりました
    ありがとう ありがとうございます どうも なるほど そうですね いいね すごい
    네 네네 예 응 감사합니다 고마워요 고마워 알겠습니다 알겠어요 좋아요 좋네요 그렇군요
    """
_PHATIC_CJK: frozenset[str] = frozenset(_PHATIC_CJK_TEXT.split())

LABEL_RE = re.compile(r"^\s*[^\W\d_][\w .'-]{0,38}:\s")
_WORD_RE = re.compile(f"[^\\W_{CJK_CHAR_CLASS}]+")


def is_low_information(text: str) -> bool:
    """True when ``text`` carries no content (see the module docstring).

    >>> is_low_information("Good to know!"), is_low_information("Bob: 👍")
    (True, True)
    >>> is_low_information("I am allergic to peanuts."), is_low_information("Yes")
    (False, False)
    """
    label = LABEL_RE.match(text)
    body = text[label.end() :] if label else text
    # Every test below can only say "content", so the cheapest go first and
    # most messages stop at their first word (this runs for every message
    # captured or replayed).
    words = 0
    for m in _WORD_RE.finditer(body):
        words += 1
        if words > MAX_WORDS or m.group().casefold() not in FILLER_WORDS:
            return False
    if body.isascii():
        return True  # no CJK run
    runs = cjk_runs(body)
    if words + len(runs) > MAX_WORDS:
        return False
    return all(r in _PHATIC_CJK for r in runs)


# Words of chat openers and closers on top of the filler vocabulary: they
# carry no topic in a question ("how's your day going?", "are you still
# there?"), though a message using them may say something.
_SMALL_TALK_TEXT = """
    going doing today tonight up there still now go went funny best hear everything
    everyone guys buddy mate dear friend fellow whats hows wassup sup yo bye-bye soon
    ttyl brb gtg see doing well fine thanks talk speak catch next time
    """
_SMALL_TALK_WORDS = FILLER_WORDS | frozenset(_SMALL_TALK_TEXT.split())
_SMALL_TALK_CJK_TEXT = """
    你好 您好 早上好 晚上好 晚安 再见 拜拜 回头见 下次聊 谢谢 好的 嗨 哈喽 在吗 在不在
    """
_PHATIC_CJK_QUERY = _PHATIC_CJK | frozenset(_SMALL_TALK_CJK_TEXT.split())
_CJK_SPLIT = re.compile(r"[，。！？、,.!?\s]+")


def is_small_talk(query: str) -> bool:
    """True when a question or remark to the assistant has no topic: a
    greeting, thanks, a farewell, "how's your day going?". Recall injects
    nothing for it. Stricter than :func:`is_low_information` in what counts
    as filler, since it reads one short query, not a stored message.

    >>> is_small_talk("Thanks, talk soon!"), is_small_talk("How's your day going?")
    (True, True)
    >>> is_small_talk("What tea do I like?"), is_small_talk("谢谢，再见！")
    (False, True)
    """
    for n, m in enumerate(_WORD_RE.finditer(query)):
        if n >= MAX_WORDS or m.group().casefold() not in _SMALL_TALK_WORDS:
            return False
    if query.isascii():
        return True
    pieces = [p for r in cjk_runs(query) for p in _CJK_SPLIT.split(r) if p]
    return all(p in _PHATIC_CJK_QUERY for p in pieces)
