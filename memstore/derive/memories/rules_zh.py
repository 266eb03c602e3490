"""Chinese clauses to memories: plain first-person facts, standing instructions, events.

The same policy as the English rules: questions, requests, hedges and
statements about other people are rejected before any fact rule runs.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import timedelta

from memstore.derive.memories.rules_text import Builder, canon, memory, third_person, whole
from memstore.derive.prompts import ExtractedMemory
from memstore.derive.queries import L0Message
from memstore.timeutil import parse_when

_QUESTION = re.compile(
    r"[吗呢吧]$|是不是|要不要|能不能|可不可以|有没有|什么|怎么|哪|多少|为什么|几[点岁个]?$"
)
_HEDGE = re.compile(
    r"如果|假如|要是|假设|万一|觉得|可能|也许|大概|不确定|不知道|不清楚|在想|好像|或许|说不定"
    r"|听说|据说|打算|考虑|想要|希望能"
)
_REQUEST = re.compile(r"帮我|帮忙|你能|你可以|给我|翻译|写一|总结|查一下|我想问|我想了解|我想知道")
_PREFIX = re.compile(r"^(?:另外|顺便说一下|顺便提一下|对了|其实|说一下|告诉你)[，,：:]?")

# --- standing instructions ----------------------------------------------------------

_STYLE = re.compile(
    r"回答|回复|答复|说话|跟我说|和我说|叫我|称呼|表情|术语|简短|简洁|简单|详细|中文|英文|语气"
    r"|格式|代码示例|例子|啰嗦|口语|书面"
)
_LEAD = re.compile(r"^(?:以后|今后|从现在开始|从今以后|从现在起)?[，,]?(?:都|请你?|麻烦你?)?")
_ASKS = re.compile(r"^我(?:希望你|要你|想让你|需要你)")


# An order about the current reply ("用英文回答这个问题", "再详细一点"), not a standing one.
_ONE_OFF = re.compile(r"这|那个|上面|下面|刚才|(?<!不要)(?<!别)再")
# About this chat, not the user's life ("我是第一次用这个", "我刚才说错了").
_CHAT = re.compile(r"你|这|那个|刚才|哈哈")
_MOOD = re.compile(r"^我(?:很|有点|好|太|非常|特别|真)\S{1,2}了?$")


def instruction(clause: str, msg: L0Message) -> ExtractedMemory | None:
    if not _STYLE.search(clause) or _ONE_OFF.search(clause):
        return None
    if clause.startswith("我") and not _ASKS.match(clause):
        return None
    if not re.search(
        r"^(?:以后|今后|从现在|从今以后|请|麻烦|不要|别|总是|一直|永远|始终|每次|务必"
        r"|尽量|用|都用|说话|回答|回复)|^我|时候|时[，,]",
        clause,
    ):
        return None
    v = _ASKS.sub("", clause)
    v = _LEAD.sub("", v).strip(" 。！")
    priority = 70 if re.search(r"的时候|时[，,]", v) else -1
    return memory(f"用户要求助手：{third_person(v)}", "instruction", priority, "沟通偏好", msg)


# --- dated events --------------------------------------------------------------------

WHEN = re.compile(
    r"(?P<when>今天早上|今早|今晚|昨天|昨晚|前天|今天|上周末|上周|上星期|上个月|去年|前年|明天|后天"
    r"|下周|下星期|下个月|明年|刚刚|刚才|刚(?!好)|(?P<n>\d+|[一二三四五六七八九十两])(?P<unit>天|周|个月|年)前)"
)
_OFFSETS = {
    "昨天": -1, "昨晚": -1, "前天": -2, "今天": 0, "今天早上": 0, "今早": 0, "今晚": 0,
    "上周": -7, "上周末": -7, "上星期": -7, "上个月": -30, "去年": -365, "前年": -730,
    "明天": 1, "后天": 2, "下周": 7, "下星期": 7, "下个月": 30, "明年": 365,
    "刚刚": 0, "刚才": 0, "刚": 0,
}  # fmt: skip
_ZH_NUM = {c: i for i, c in enumerate("零一二三四五六七八九十", 0)} | {"两": 2}
_UNITS = {"天": 1, "周": 7, "个月": 30, "年": 365}


def dated(clause: str, msg: L0Message) -> ExtractedMemory | None:
    m = WHEN.search(clause)
    if m is None or "我" not in clause:
        return None
    day = parse_when(msg.occurred_at).date()
    if m["n"]:
        n = int(m["n"]) if m["n"].isdigit() else _ZH_NUM[m["n"]]
        day -= timedelta(days=n * _UNITS[m["unit"]])
    else:
        day += timedelta(days=_OFFSETS[m["when"]])
    keep = m["when"] if m["when"].startswith("刚") else ""
    rest = (clause[: m.start()] + keep + clause[m.end() :]).strip(" ,，")
    if not rest or _MOOD.match(rest):
        return None
    iso = day.isoformat()
    return memory(f"{iso}，{third_person(rest)}", "episodic", 60, "经历", msg, iso)


# --- plain facts ----------------------------------------------------------------------


_ADV = r"(?:很|非常|特别|最|也|真的|还|一直|都)?"
_FAMILY = (
    r"(?:老婆|老公|妻子|丈夫|爱人|太太|先生|儿子|女儿|孩子|爸爸|妈妈|爸妈|父母|哥哥|姐姐|弟弟|妹妹"
    r"|爷爷|奶奶|外公|外婆|姥姥|姥爷|男朋友|女朋友|未婚妻|未婚夫|家人|孙子|孙女)"
)
_PET = r"(?:猫|狗|猫咪|小猫|小狗|宠物|鹦鹉|兔子|仓鼠|鱼|金毛)"
_HEALTH = (
    r"(?:病|症|炎|哮喘|糖尿病|血压|血糖|抑郁|焦虑|过敏|不耐受|怀孕|近视|远视|散光|失眠|头痛|偏头痛"
    r"|色盲|心脏|胃|腰|膝盖|颈椎|残疾|听力)"
)
_STATE = r"(?:结婚了|已婚|离婚了|单身|订婚了|退休了|失业了|吃素|素食|左撇子)"
_ROUTINE = (
    r"(?:每天|每周|每星期|每个|每晚|每早|每月|每年|一般|通常|平时|经常|总是|周末|工作日"
    r"|[零一二三四五六七八九十两\d]+点)"
)
_NOT_THING = r"(?!你|这个|那个|它|这样|那样)"

_RULES: list[tuple[re.Pattern[str], Builder]] = [
    (
        re.compile(r"^我(?:的名字)?叫(?P<v>.+)|^我的名字是(?P<v2>.+)"),
        canon("用户的名字是{v}", "个人信息", 90),
    ),
    (re.compile(r"^我对(?P<v>.+?)过敏"), canon("用户对{v}过敏", "健康", 95)),
    (re.compile(rf"^我的?(?:{_FAMILY}|{_PET})"), whole("家庭", 75)),
    (
        re.compile(rf"^我{_ADV}(?:不喜欢|讨厌|不爱|受不了)(?P<v>.+)"),
        canon("用户不喜欢{v}", "喜好", 65),
    ),
    (re.compile(r"^我最喜欢的.+?是"), whole("喜好", 65)),
    (
        re.compile(rf"^我{_ADV}(?:喜欢|热爱|爱|偏爱){_NOT_THING}(?P<v>.+)"),
        canon("用户喜欢{v}", "喜好", 65),
    ),
    (
        re.compile(
            r"^我(?:现在)?住在(?P<v>.+)|^我(?:已经)?搬到了?(?P<v2>.+)|^我从.+搬到了?(?P<v3>.+)"
        ),
        canon("用户住在{v}", "居住", 80),
    ),
    (re.compile(r"^我(?:现在)?在(?P<v>.+?)(?:工作|上班)"), canon("用户在{v}工作", "工作", 80)),
    (re.compile(r"^我(?:现在)?在.+生活|^我老家在|^我是.{1,6}人$|^我来自"), whole("居住", 80)),
    (re.compile(rf"^我{_ROUTINE}|^我.{{0,4}}{_ROUTINE}"), whole("日常", 65)),
    (re.compile(rf"^我(?:有|患有|得了|一直)?.{{0,6}}{_HEALTH}"), whole("健康", 80)),
    (
        re.compile(
            rf"^我{_STATE}|^我戒.+了|^我(?:不|只|从不|从来不|很少|基本不|不太?能)(?:吃|喝)|^我吃不了"
        ),
        whole("饮食", 75),
    ),
    (re.compile(r"^我(?:今年)?[\d一二三四五六七八九十]+岁"), whole("个人信息", 80)),
    (
        re.compile(
            r"^我(?:家里?)?(?:有|养了|养着)(?!点|一点|.{0,2}(?:问题|想法|事|办法|建议|疑问|空|时间))"
        ),
        whole("家庭", 70),
    ),
    (re.compile(r"^我的(?!问题|意思|想法|建议).{1,6}(?:是|叫)"), whole("个人信息", 70)),
    (re.compile(r"^我(?:正)?在学|^我会说"), whole("个人信息", 65)),
    (re.compile(r"^我对.+(?:感兴趣|着迷)"), whole("喜好", 65)),
    (re.compile(r"^我做.+的$"), whole("工作", 75)),
    (
        re.compile(
            r"^我(?:还|也|现在|目前|已经)?是(?!说|来|不|想|在|觉得|真的|开玩笑)(?:一名|一个|一位)?(?P<v>.+)"
        ),
        canon("用户是{v}", "个人信息", 75),
    ),
]


def fact(clause: str, msg: L0Message) -> list[ExtractedMemory]:
    for pattern, build in _RULES:
        m = pattern.search(clause)
        if m is not None:
            if "v" in pattern.groupindex and not m["v"]:  # an alternative's own group
                d = m.groupdict()
                m = re.match(r"(?P<v>.+)", d.get("v2") or d.get("v3") or "") or m
            got = build(m, msg)
            return [got] if got is not None else []
    return []


def classify(
    clause: str, msg: L0Message, same_subject: Callable[[str], bool]
) -> list[ExtractedMemory]:
    """The memories of one Chinese clause (already split, no trailing punctuation)."""
    clause = _PREFIX.sub("", clause).strip()
    if not clause or _QUESTION.search(clause) or _HEDGE.search(clause) or _REQUEST.search(clause):
        return []
    got = instruction(clause, msg)
    if got is not None:
        return [got]
    if (not clause.startswith("我") and not WHEN.match(clause)) or _CHAT.search(clause):
        return []
    event = dated(clause, msg)
    if event is None:
        return fact(clause, msg)
    plain = WHEN.sub("", clause).strip(" ，,")
    return [event, *[f for f in fact(plain, msg) if same_subject(f.content)]]
