"""English clauses to memories: plain first-person facts, standing instructions, events.

A clause becomes a memory only when it is a declarative statement about the
user (or the user's family, pets, home…) that stays true, an instruction about
how the assistant should answer from now on, or a dated event. Everything
conversational — questions, requests for a task, hedges, moods, reactions
("I love it!"), "I have a question" — is rejected first: a wrong memory is
worse than a missing one.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import date, timedelta

from memstore.derive.memories.rules_en_instructions import POLITE, instruction
from memstore.derive.memories.rules_text import Builder, canon, memory, third_person, whole
from memstore.derive.prompts import ExtractedMemory
from memstore.derive.queries import L0Message
from memstore.timeutil import parse_when

_I = re.IGNORECASE

# --- what is never a fact ------------------------------------------------------

_QUESTION = re.compile(
    r"^(?:can|could|would|will|do|does|did|should|shall|may|is|are|am|was|were|have you|has"
    r"|what|where|why|how|who|whom|which|whose)\b",
    _I,
)
_HEDGE = re.compile(
    r"\b(?:maybe|might|perhaps|probably|possibly|I think|I guess|I believe|I suppose|wonder"
    r"|wondering|I wish|not sure|not certain|unsure|some ?day|thinking (?:about|of)|considering"
    r"|hope|hopefully|if|unless|whether|would|could|should|pretend|imagine|suppose|let's say"
    r"|what if|in case|says|said|told me)\b",
    _I,
)
_PREFIX = re.compile(
    r"^(?:(?:hi|hey|hello|ok|okay|oh|so|well|also|and|btw|by the way|fyi|just so you know"
    r"|just to let you know|for the record|for context|actually|(?:just )?(?:a )?(?:quick )?"
    r"heads[- ]up|note|fun fact|honestly|anyway|before we start|you should know(?: that)?"
    r"|you need to know(?: that)?|for your information)\b[\s,:!.—–-]*)+",
    _I,
)
_SUFFIX = re.compile(r"[\s,]*(?:by the way|btw|fyi|please|too|as well)$", _I)
_SUFFIX_ENDS = ("way", "btw", "fyi", "please", "too", "well")

# --- dated events ------------------------------------------------------------------

_WEEKDAY = r"(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)"
_MONTH = (
    r"(?:january|february|march|april|may|june|july|august|september|october|november|december)"
)
_NUM = r"(?:\d{1,2}|a|an|one|two|three|four|five|six|seven|eight|nine|ten|a few|couple of)"
WHEN = re.compile(
    rf"\b(?P<when>yesterday|today|tonight|tomorrow|this morning|this afternoon|this evening"
    rf"|earlier today|last night|(?:last|next|this) (?:week|weekend|month|year|{_WEEKDAY})"
    rf"|last (?P<month>{_MONTH})"
    rf"|(?P<n>{_NUM}) (?P<unit>days?|weeks?|months?|years?) ago"
    rf"|on (?P<date>\d{{4}}-\d{{2}}-\d{{2}})|on {_WEEKDAY}|in {_MONTH}|in (?:19|20)\d\d|recently"
    r"|just(?= (?!(?:wanted|needed|meant|thought|wondered|figured|noticed|realized|asked|tried"
    r"|checked|replied|answered)\b)(?:got|had|came|went|bought|began|left|won|lost|met|\w+ed)\b))"
    r"\b,?",
    _I,
)
_OFFSETS = {
    "yesterday": -1, "last night": -1, "today": 0, "tonight": 0, "this morning": 0,
    "this afternoon": 0, "this evening": 0, "earlier today": 0, "tomorrow": 1,
    "last week": -7, "last weekend": -7, "last month": -30, "last year": -365,
    "next week": 7, "next weekend": 7, "next month": 30, "next year": 365,
    "this week": 0, "this weekend": 0, "this month": 0, "this year": 0, "just": 0,
    "recently": 0,
}  # fmt: skip
_EXACT = frozenset(
    ["yesterday", "today", "tonight", "tomorrow", "this morning", "this afternoon",
     "this evening", "earlier today", "last night"]
)  # fmt: skip
_UNITS = {"day": 1, "week": 7, "month": 30, "year": 365}
_WORDS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
          "seven": 7, "eight": 8, "nine": 9, "ten": 10, "a few": 3, "couple of": 2}  # fmt: skip
# "I'm a bit tired today" is how the user feels, not something that happened.
_MOOD_WORDS = (
    r"tired|sick|hungry|busy|bored|happy|sad|stressed|exhausted|fine|good|ok|okay|great"
    r"|curious|confused|sleepy|angry|upset|excited|nervous|free|here|back|home|done|ready"
    r"|sorry|impressed|glad|lost|late|serious|kidding|joking|new|alright"
)
_MOOD = re.compile(
    r"^(?:I|we)(?:'m|'re| am| are) (?:(?:a bit|a little|so|very|really|kind of|pretty|just) )*"
    rf"(?:{_MOOD_WORDS})\b",
    _I,
)
_EVENT_SUBJECT = re.compile(
    r"^(?:(?:so|then|and|also|finally|actually|well) )?(?:I|we|my|our)\b", _I
)
_FIRST = re.compile(r"\b(?:I|we|my|our)\b", _I)


_MONTHS = _MONTH.strip("(?:)").split("|")


def _day(m: re.Match[str], today: date) -> tuple[str | None, str]:
    """The ISO day an event happened on (None when vague) and the words before it."""
    iso, word = _iso_day(m, today)
    if m["month"] and iso is not None:  # a month's name reads better than its first day
        return iso, f"In {m['month'].capitalize()} {iso[:4]}"
    return iso, f"{word} {iso}"


def _iso_day(m: re.Match[str], today: date) -> tuple[str | None, str]:
    when = m["when"].lower()
    if m["month"]:  # "last May": the latest May before the message's month
        month = _MONTHS.index(m["month"].lower()) + 1
        year = today.year if month < today.month else today.year - 1
        return date(year, month, 1).isoformat(), "In"
        return parse_when(m["date"]).date().isoformat(), "On"
    if m["n"]:
        n = int(m["n"]) if m["n"].isdigit() else _WORDS[m["n"].lower()]
        return (today - timedelta(days=n * _UNITS[m["unit"].lower().rstrip("s")])).isoformat(), (
            "Around"
        )
    if when in _OFFSETS:
        exact = when in _EXACT
        return (today + timedelta(days=_OFFSETS[when])).isoformat(), "On" if exact else "Around"
    return None, ""


def dated(clause: str, msg: L0Message) -> ExtractedMemory | None:
    found = list(WHEN.finditer(clause))
    if not found or not _FIRST.search(clause) or re.search(r"(?i)\bborn\b", clause):
        return None
    # "I just started boot camp last month": the date is "last month", not "just".
    m = next((f for f in found if f["when"].lower() not in ("just", "recently")), found[0])
    rest = re.sub(r"\s{2,}", " ", (clause[: m.start()] + " " + clause[m.end() :])).strip(" ,")
    if m["when"].lower() == "just":
        rest = re.sub(r"(?i)\b(I|we) ", r"\1 just ", rest, count=1)
    own = re.match(r"(?i)^(?:is|was|will be) ((?:my|our) .+)$", rest)
    if own is not None:  # "today is my birthday"
        rest = own[1]
    # The user must be the subject: "that picture was from a trip we took" is not an event.
    if not _EVENT_SUBJECT.match(rest) or _MOOD.match(rest):
        return None
    iso, word = _day(m, parse_when(msg.occurred_at).date())
    told = third_person(rest)
    content = f"{word}, {told}" if iso else f"{m['when'].strip(', ')}, {told}"
    return memory(content, "episodic", 60, "Events", msg, iso)


# --- plain facts --------------------------------------------------------------------


def _canon(template: str, scene: str, priority: int) -> Builder:
    return canon(template, scene, priority, trim=lambda v: _TAIL.sub("", v).strip())


def _whole(scene: str, priority: int) -> Builder:
    return whole(scene, priority, cut=_CUT)


# Qualifiers of the statement, not of the thing ("I hate coffee now").
_TAIL = re.compile(
    r"(?:\s+(?:now|anymore|any more|too|as well|a lot|very much|so much|these days))+$", _I
)
_CUT = re.compile(r",\s*(?:so|but|which|because)\b", _I)
_ADV = r"(?:(?:really|absolutely|also|truly|just|totally|actually|still|now|currently) )*"
_NOT_THING = r"(?!(?:it|that|this|you|them|when|how|what|your|yours|the idea|the way)\b)"
_AM = r"I(?:'m| am)"
_STATE = (
    r"(?:vegetarian|vegan|pescatarian|lactose|gluten|diabetic|pregnant|colou?r-?blind|married"
    r"|single|divorced|engaged|widowed|retired|unemployed|self-employed|left-handed"
    r"|right-handed|epileptic|deaf|blind|hard of hearing|asthmatic|celiac|introverted"
    r"|extroverted|originally from|from|based in|born|into|crazy about|obsessed with"
    r"|terrified of|afraid of|scared of|studying(?! for)|learning|on (?:a |an )?[\w-]+ diet"
    r"|on insulin"
    r"|doing (?:a |an )?(?:phd|masters?|master's|degree|bachelor'?s?|intermittent fasting|keto)"
    r"|on medication|allergic|intolerant|sensitive to|a native|the (?:oldest|youngest|only)"
    r"|the (?:founder|co-founder|owner|ceo|cto|cfo|head|manager|director|lead|president) of"
    r"|cutting (?:back|down) on|\d+ (?:weeks|months) pregnant"
    r"|an only child|freelance|\w+-free|in (?:law|med|medical|grad|graduate|nursing|high)"
    r" school)"
)
_BAD_NOUN = (
    r"(?!(?:bit|little|robot|question|idiot|fool|mess|genius|fan of (?:it|that|this|you))\b)"
)
_FAMILY = (
    r"(?:wife|husband|partner|boyfriend|girlfriend|fianc[eé]e?|spouse|sons?|daughters?|kids?"
    r"|child|children|baby|mom|mum|mother|dad|father|parents|brothers?|sisters?|siblings?"
    r"|grandmother|grandma|grandfather|grandpa|grandparents|grandsons?|granddaughters?"
    r"|grandchildren|family|aunt|uncle|cousins?|twin|in-laws)"
)
_PET = (
    r"(?:dogs?|cats?|pupp(?:y|ies)|kittens?|pets?|parrots?|birds?|fish|hamsters?|rabbits?"
    r"|horses?|turtles?|tortoises?|snakes?|lizards?|guinea pigs?|ferrets?|chickens|goldfish)"
)
_HABIT = re.compile(
    r"\b(?:every|usually|always|often|a lot|daily|weekly|each|regularly|normally|generally"
    rf"|on (?:weekends|weekdays|{_WEEKDAY}s)|around (?:midnight|noon)|nights|night shifts?"
    r"|to (?:monday|friday)|(?:wake|get) up at|go to (?:bed|sleep) at|(?:start|finish) work at"
    r"|(?:once|twice|(?:two|three|four|five|several|many|\d+) times) a (?:day|week|month)"
    r"|a day|a week|per (?:day|week)|most (?:days|weekends|mornings|evenings|nights|weeks))\b",
    _I,
)
_FOOD_VERB = r"(?:eat|drink|touch|digest|tolerate|handle)"
_STABLE_VERB = (
    r"(?:live|work|teach|run|own|keep|eat|drink|avoid|play|speak|study|wear|suffer from"
    r"|struggle with|rent|manage|collect|volunteer|commute|practi[cs]e|grew up|was born"
    r"|gave up|stopped eating|stopped drinking|quit|support|follow|do \w+ for a living"
    r"|take care of|look after|care for"
    r"|take (?:\w+ ){0,3}(?:medication|medicine|pills|insulin|vitamins|supplements))"
)

_RULES: list[tuple[re.Pattern[str], Builder]] = [
    (
        re.compile(r"^(?:my name is|my name's|call me)\s+(?P<v>.+)", _I),
        _canon("The user's name is {v}", "Identity", 90),
    ),
    (
        re.compile(rf"^{_AM} {_ADV}allergic to\s+(?P<v>.+)", _I),
        _canon("The user is allergic to {v}", "Health", 95),
    ),
    (
        re.compile(rf"^{_AM} (?P<v>\d{{1,3}})(?: years? old)?(?=$|,| and )", _I),
        _canon("The user is {v} years old", "Identity", 80),
    ),
    (
        re.compile(rf"^{_AM} not a (?:big |huge )?fan of\s+(?P<v>.+)", _I),
        _canon("The user dislikes {v}", "Preferences", 65),
    ),
    (
        re.compile(
            rf"^I {_ADV}(?:hate|dislike|detest|can't stand|cannot stand|don't like"
            rf"|do not like|don't enjoy)\s+{_NOT_THING}(?P<v>.+)",
            _I,
        ),
        _canon("The user dislikes {v}", "Preferences", 65),
    ),
    (
        re.compile(rf"^I {_ADV}prefer\s+(?P<v>.+)", _I),
        _canon("The user prefers {v}", "Preferences", 65),
    ),
    (
        re.compile(rf"^I {_ADV}(?:love|like|enjoy|adore)\s+{_NOT_THING}(?P<v>.+)", _I),
        _canon("The user likes {v}", "Preferences", 65),
    ),
    (
        re.compile(rf"^I{_ADV} (?:live|am living|'m living) (?:in|near)\s+(?P<v>.+)", _I),
        _canon("The user lives in {v}", "Home", 80),
    ),
    (
        re.compile(r"^I(?:'ve| have| just)? moved to\s+(?P<v>.+)", _I),
        _canon("The user lives in {v}", "Home", 80),
    ),
    (
        re.compile(rf"^I{_ADV} work (?P<v>(?:as|at|for) .+)", _I),
        _canon("The user works {v}", "Work", 80),
    ),
    (
        re.compile(rf"^{_AM} {_ADV}(?:an? )?(?:huge |big )?fan of .+|^{_AM} {_ADV}{_STATE}\b", _I),
        _whole("Identity", 75),
    ),
    (re.compile(rf"^{_AM} {_ADV}an? {_BAD_NOUN}\w", _I), _whole("Identity", 75)),
    (re.compile(rf"^I(?:'ve| have) been (?:an? )?{_STATE}\b", _I), _whole("Identity", 75)),
    (
        re.compile(
            r"^I(?:'ve| have) been (?:dealing with|struggling with|suffering from|living with"
            r"|diagnosed with|on)\b|^I was diagnosed with\b",
            _I,
        ),
        _whole("Health", 80),
    ),
    (
        re.compile(
            r"^.{1,40}\b(?:upsets? my stomach|(?:gives?|makes?) me (?:a rash|hives|headaches?"
            r"|migraines?|sick|ill|nauseous|bloated|itchy))\b",
            _I,
        ),
        _whole("Health", 85),
    ),
    (
        re.compile(
            r"^my (?:knees?|back|neck|hips?|shoulders?|wrists?|ankles?|feet|eyes|stomach|joints)"
            r" (?:hurts?|aches?|is bad|are bad|is weak|gives? me)\b",
            _I,
        ),
        _whole("Health", 75),
    ),
    (re.compile(rf"^{_AM} not an? (?:\w+ )?person\b", _I), _whole("Preferences", 65)),
    (
        re.compile(
            r"^I'm in (?!(?i:love|trouble|pain|charge|town)$)[A-Z][a-z]+(?:,? [A-Z][a-z]+)?$"
        ),
        _whole("Home", 70),
    ),
    (
        re.compile(rf"^I'm (?!(?i:{_MOOD_WORDS})$)[A-Z][a-z]+$"),
        _whole("Identity", 75),
    ),
    (
        re.compile(
            rf"^(?:my|our) (?:{_FAMILY}|{_PET})\b(?:'s name| \w+)?(?: and I)?"
            r" (?!(?:thinks|says|asks|wants|tells|keeps|believes|wonders|hopes|feels|needs)\b)"
            r"(?:is|are|was|were|'s|go|have|live|work|\w+s)\b",
            _I,
        ),
        _whole("Family", 75),
    ),
    (
        re.compile(
            r"^(?:my|our) (?:favou?rite \w+(?: \w+)?|birthday|job|hobby|hobbies"
            r"|native language|first language|diet) (?:is|are)\b",
            _I,
        ),
        _whole("Identity", 70),
    ),
    (
        re.compile(
            r"^(?!(?:that|this|it|which)\b).{1,60}\b(?:is|are)(?:n't| not)? my"
            r" (?:absolute |all-time |very )?(?:favou?rite"
            r"|hobby|hobbies|thing|cup of tea)\b",
            _I,
        ),
        _whole("Preferences", 65),
    ),
    (re.compile(r"^home for me is\b", _I), _whole("Home", 75)),
    (
        re.compile(
            r"^I(?:'ve| have) (?:lived|been living|worked|been working) (?:in|at|for|as)\b", _I
        ),
        _whole("Home", 75),
    ),
    (
        re.compile(
            rf"^(?:I|we)(?:(?:'ve| have) {_ADV}got| {_ADV}(?:have|own))"
            r" (?!(?:a |an |any |no |some |another )?"
            r"(?:questions?|ideas?|problems?|issues?|doubts?|feeling|minute|moment|second|sec"
            r"|chance|time|clue|to|fun|a go|a look|news|an idea|meeting|appointment|call"
            r"|deadline|exam|test|lot of|bunch of)\b)\w",
            _I,
        ),
        _whole("Identity", 70),
    ),
    (
        re.compile(
            rf"^I (?:don't|do not|never|only|rarely|mostly|no longer|try not to|haven't"
            rf"|have not|hardly ever) {_ADV}(?:{_FOOD_VERB}|eaten|drunk|had|smoke|smoked|drive"
            rf"|own|have any)\b",
            _I,
        ),
        _whole("Diet", 75),
    ),
    (re.compile(rf"^I (?:can't|cannot) {_ADV}(?:{_FOOD_VERB}|have)\b", _I), _whole("Diet", 75)),
    (re.compile(rf"^(?:I|we) {_ADV}(?:{_STABLE_VERB})\b", _I), _whole("Identity", 70)),
]


# Facts are about the user's life, not about this chat ("I'm into it", "I love your
# work") and not jokes ("I'm allergic to Mondays lol").
_CHAT = re.compile(
    r"\b(?:it|these|those|you|your|every time|lol|haha|jk|lmao|rofl)\b|[:;]-?[)(D]|[😂🤣😅😉]"
    r"|\bthis\b(?! (?:morning|afternoon|evening|week|weekend|month|year|summer|winter|spring))",
    _I,
)


_AS_A = re.compile(
    r"^as an? (?!(?:reminder|example|aside|side note|result|matter|rule|bonus|test)\b)"
    r"(?P<v>[\w-]+(?: [\w-]+)?)(?:,|$)",
    _I,
)


def fact(clause: str, msg: L0Message) -> list[ExtractedMemory]:
    if _CHAT.search(clause):
        return []
    as_a = _AS_A.match(clause)
    if as_a is not None:  # "As a vegetarian, I need iron": the aside is the fact
        article = clause.split()[1]
        return [memory(f"The user is {article} {as_a['v']}", "persona", 70, "Identity", msg)]
    for pattern, build in _RULES:
        m = pattern.search(clause)
        if m is not None:
            got = build(m, msg)
            return [got] if got is not None else []
    if _HABIT.search(clause) and _HABIT_SUBJECT.match(_habit_first(clause)):
        return [memory(third_person(_habit_first(clause)), "persona", 65, "Routine", msg)]
    return []


_HABIT_SUBJECT = re.compile(
    rf"(?:I|we)\b(?!'d)|(?:my|our) (?:{_FAMILY}|{_PET}|classes|lessons|shifts?|work|job|commute"
    r"|schedule|routine)\b",
    _I,
)


def _habit_first(clause: str) -> str:
    # "Every Sunday I call my mom" -> "I call my mom every Sunday"
    m = re.match(r"(?i)^((?:every|on|each) [^,]+?),? ((?:I|we)\b.+)$", clause)
    return f"{m[2]} {m[1][0].lower()}{m[1][1:]}" if m else clause


def rejected(clause: str) -> bool:
    return bool(_QUESTION.match(clause) or _HEDGE.search(clause))


# Chat spelling: "im vegetarian", "i dont eat pork", "ive got two cats".
_CASUAL = re.compile(
    r"\b(?:(?P<i>i)|(?P<im>[Ii]m)|(?P<ive>[Ii]ve)"
    r"|(?P<nt>(?:do|does|did|is|are|was|were|have|has|ca|wo|would|could|should))nt)\b"
)
_CASUAL_FORMS = {"i": "I", "im": "I'm", "ive": "I've"}


def _casual(m: re.Match[str]) -> str:
    return f"{m['nt']}n't" if m["nt"] else _CASUAL_FORMS[m[0].lower()]


# Cheap gate: a clause without the user in it, an order or an aside is nothing to us.
_ANY = re.compile(
    r"\b(?:I|my|me|we|our|us|mine)\b|^(?:as an?|always|never|don't|do not|stop|keep|use|avoid"
    r"|answer|reply|respond|speak|talk|write|give|call|be|make|include|add|cite|explain|show"
    r"|format|address|refer|try|start|put|list|switch|no|short|shorter|brief|longer|detailed"
    r"|simple|simpler|concise|more|less|fewer|please|kindly|from now on|going forward|in future"
    r"|in the future|when|whenever)\b",
    _I,
)


def strip_prefix(clause: str) -> str:
    clause = _CASUAL.sub(_casual, clause)
    clause = POLITE.sub("", _PREFIX.sub("", clause))
    if clause[-6:].lower().endswith(_SUFFIX_ENDS):  # the regex is only worth it then
        clause = _SUFFIX.sub("", clause)
    return clause.strip()


def classify(
    clause: str, msg: L0Message, same_subject: Callable[[str], bool]
) -> list[ExtractedMemory]:
    """The memories of one English clause (already split, no trailing punctuation)."""
    clause = strip_prefix(clause)
    if not clause or not _ANY.search(clause) or rejected(clause):
        return []
    got = instruction(clause, msg)
    if got is not None:
        return [got]
    event = None if _CHAT.search(clause) else dated(clause, msg)
    if event is None:
        return fact(clause, msg)
    plain = re.sub(r"\s{2,}", " ", WHEN.sub("", clause)).strip(" ,")
    # The event keeps its date; a plain fact is added only for a changed slot
    # ("I moved to Munich last week" also means "lives in Munich").
    extra = [f for f in fact(plain, msg) if same_subject(f.content)]
    return [event, *extra]
