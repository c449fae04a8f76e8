"""Heuristic fact extraction: clear self-statements in user messages, English and Chinese.

The fallback when no LLM extractor is configured or it fails. It aims at precision: a rule
fires only on an explicit statement ("my name is …", "我住在…", "the contract was signed on …",
"违约金为…"), never on questions ("…?") or conditionals ("if …", "如果…").

Invariants:
- text is redacted (gateway.core.text.pii) before any rule sees it, and a value holding a
  placeholder is dropped: a phone number, e-mail or ID number is never a fact's value;
- keys come from the fixed snake_case vocabulary `VOCABULARY` (which includes
  `<relation>_name` for the user's pets and family: `cat_name`, `son_name`, …), or are
  `prefers_<slug>` / `dislikes_<slug>` for free-form likes; values are the user's own words
  (their language);
- within one message a key is given once (its last statement); facts come in message order,
  so upserting them in order lets the newest statement win.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

from gateway.core.memory.facts import MAX_KEY_LENGTH, Fact, clean_value, normalize_key
from gateway.core.messages import StoredMessage
from gateway.core.text.pii import has_placeholder, redact

# -- building blocks --------------------------------------------------------------------------

_N = "[0-9〇零一二两三四五六七八九十]"
DATE_ZH = (rf"(?:{_N}{{2,4}}年{_N}{{1,3}}月(?:{_N}{{1,3}}[日号])?|{_N}{{1,3}}月{_N}{{1,3}}[日号]"
           rf"|{_N}{{4}}年(?:{_N}{{1,3}}月)?|[0-9]{{4}}[-/.][0-9]{{1,2}}(?:[-/.][0-9]{{1,2}})?)")
_MONTH = (r"(?i:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?"
          r"|Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)")
DATE_EN = (rf"(?:[0-9]{{4}}-[0-9]{{1,2}}-[0-9]{{1,2}}|[0-9]{{1,2}}/[0-9]{{1,2}}/[0-9]{{2,4}}"
           rf"|{_MONTH}\.? [0-9]{{1,2}}(?![0-9])(?:st|nd|rd|th)?(?:,? [0-9]{{4}})?"
           rf"|(?:the )?[0-9]{{1,2}}(?:st|nd|rd|th)? (?:of )?{_MONTH}(?:,? [0-9]{{4}})?"
           rf"|{_MONTH},? [0-9]{{4}}|[0-9]{{4}})")
DATE = rf"(?:{DATE_ZH}|{DATE_EN})"
_NUM_ZH = r"(?:[0-9][0-9,]*(?:\.[0-9]+)?|[零一二两三四五六七八九十百千万]+)"
AMOUNT_ZH = (rf"(?:(?:人民币|RMB ?|¥|￥) ?{_NUM_ZH}[万千百亿]*(?:元|块钱?)?"
             rf"|{_NUM_ZH}(?:[万千百亿]+(?:元|块钱?|美元)?|元|块钱?|美元))")
AMOUNT_EN = (r"(?:[$€£¥] ?[0-9][0-9,]*(?:\.[0-9]+)?(?: ?(?:k|thousand|million|bn|billion)\b)?"
             r"|[0-9][0-9,]*(?:\.[0-9]+)?(?: (?:thousand|million|billion))? ?"
             r"(?i:yuan|rmb|cny|dollars?|usd|euros?|eur|pounds?|gbp)(?![A-Za-z]))")
AMOUNT = rf"(?:{AMOUNT_EN}|{AMOUNT_ZH})"
DURATION = (rf"(?:{_N}{{1,4}}(?:个)?(?:年半?|个?月|天|周)|(?:[0-9]+|one|two|three|four|five|six"
            rf"|seven|eight|nine|ten|twelve|eighteen|twenty-four) (?:years?|months?|weeks?))")
_PLACE_EN = r"[A-Z][\w'.-]*(?:[ -](?:[A-Z][\w'.-]*|of|de|la|upon|on)){0,4}(?:, [A-Z][\w.-]*)?"
_NAME_EN = r"[A-Z][a-zA-Z'-]+(?: [A-Z][a-zA-Z'-]+){0,2}"
_STOP_ZH = r"(?=[\s，。,.!！?？；;、：:]|$)"
_PLACE_ZH = rf"[\u4e00-\u9fffA-Za-z0-9·]{{2,15}}?(?=[\s，。,.!！?？；;、]|$|工作|上班|生活|了)"
_NAME_ZH = (r"(?:[\u4e00-\u9fff·]{2,4}?(?=[\s，。,.!！?？；;、]|$|今年|我|在|住|是|来自)"
            r"|[A-Z][a-zA-Z]+(?: [A-Z][a-zA-Z]+)?)")
_JOBS_ZH = ("工程师|程序员|律师|医生|护士|教师|老师|会计|司机|教授|经理|总监|设计师|研究生|"
            "博士生|大学生|学生|研究员|销售|厨师|公务员|记者|编辑|法官|警察|工人|农民|店主|老板|"
            "创业者|自由职业者|分析师|顾问|主管|律师助理")
_CLAUSE = r"[^，。；！？!?;\n]"

# -- the vocabulary ---------------------------------------------------------------------------

_META: dict[str, tuple[str, float]] = {  # key -> (type, importance)
    "user_name": ("fact", 0.9), "user_location": ("fact", 0.7), "user_hometown": ("fact", 0.5),
    "user_work_location": ("fact", 0.6), "user_employer": ("fact", 0.6),
    "user_job": ("fact", 0.7), "user_age": ("fact", 0.6), "user_birthday": ("fact", 0.7),
    "user_salary": ("fact", 0.7), "contract_date": ("fact", 0.9),
    "contract_amount": ("fact", 0.9), "contract_term": ("fact", 0.85),
    "contract_end_date": ("fact", 0.85), "contract_penalty": ("fact", 0.85),
    "deposit_amount": ("fact", 0.8), "rent_amount": ("fact", 0.8),
    "payment_deadline": ("fact", 0.85), "debt_amount": ("fact", 0.85),
    "amount_owed_to_user": ("fact", 0.85), "unpaid_wages": ("fact", 0.85),
    "employment_start_date": ("fact", 0.8), "termination_date": ("fact", 0.85),
    "preferred_language": ("preference", 0.8), "preferred_answer_length": ("preference", 0.7),
}
# Whom a name belongs to: the words for the user's pets and family members (English, Chinese)
# -> the relation in the key `<relation>_name`.
_RELATIONS_EN = {
    "cat": "cat", "kitten": "cat", "kitty": "cat", "dog": "dog", "puppy": "dog", "pup": "dog",
    "rabbit": "rabbit", "bunny": "rabbit", "hamster": "hamster", "parrot": "parrot",
    "bird": "bird", "fish": "fish", "horse": "horse", "pony": "horse", "turtle": "turtle",
    "tortoise": "turtle", "snake": "snake", "pet": "pet",
    "wife": "wife", "husband": "husband", "partner": "partner", "girlfriend": "girlfriend",
    "boyfriend": "boyfriend", "fiancee": "fiance", "fiancée": "fiance", "fiance": "fiance",
    "fiancé": "fiance", "son": "son", "daughter": "daughter", "baby": "child", "kid": "child",
    "child": "child", "mother": "mother", "mom": "mother", "mum": "mother", "father": "father",
    "dad": "father", "brother": "brother", "sister": "sister", "grandmother": "grandmother",
    "grandma": "grandmother", "grandfather": "grandfather", "grandpa": "grandfather",
}
_RELATIONS_ZH = {
    "猫咪": "cat", "小猫": "cat", "猫": "cat", "狗狗": "dog", "小狗": "dog", "狗": "dog",
    "兔子": "rabbit", "仓鼠": "hamster", "鹦鹉": "parrot", "乌龟": "turtle", "宠物": "pet",
    "老婆": "wife", "妻子": "wife", "太太": "wife", "爱人": "partner", "老公": "husband",
    "丈夫": "husband", "先生": "husband", "男朋友": "boyfriend", "女朋友": "girlfriend",
    "儿子": "son", "女儿": "daughter", "孩子": "child", "宝宝": "child", "妈妈": "mother",
    "母亲": "mother", "爸爸": "father", "父亲": "father", "哥哥": "brother", "弟弟": "brother",
    "姐姐": "sister", "妹妹": "sister", "奶奶": "grandmother", "外婆": "grandmother",
    "姥姥": "grandmother", "爷爷": "grandfather", "外公": "grandfather", "姥爷": "grandfather",
}
_META.update({f"{r}_name": ("fact", 0.6)
              for r in {*_RELATIONS_EN.values(), *_RELATIONS_ZH.values()}})
VOCABULARY = frozenset(_META)
"""Keys of the heuristic rules: each means one distinct thing (see facts.dedupe_key)."""


@dataclass(frozen=True, slots=True)
class Rule:
    key: str
    pattern: re.Pattern[str]
    confidence: float = 0.7
    value: str | None = None
    """A fixed value, or None for the pattern's group `v`."""


def _rule(key: str, pattern: str, confidence: float = 0.7, value: str | None = None) -> Rule:
    return Rule(key, re.compile(pattern), confidence, value)


_I_AM = r"(?i:i'm|i am)"
_RULES: tuple[Rule, ...] = (
    # who the user is
    _rule("user_name", rf"(?i:\bmy name is|\bmy name's|\bcall me)\s+(?P<v>{_NAME_EN})", 0.85),
    _rule("user_name", rf"^(?:(?i:hi|hello|hey)[,!]?\s+)?{_I_AM}\s+(?P<v>{_NAME_EN})"
                       r"(?=\s*(?:[,.!;]|$))", 0.6),
    _rule("user_name", rf"我(?:叫|的名字是|的名字叫|名叫)(?P<v>{_NAME_ZH})", 0.85),
    _rule("user_location", r"(?i:\bi (?:live|reside) in|\bi'm living in|\bi am living in"
                           r"|\bi'm based in|\bi am based in|\bi (?:have )?moved to)"
                           rf"\s+(?P<v>{_PLACE_EN})"),
    _rule("user_location", rf"我(?:现在|目前)?(?:住在|居住在|现居|定居在?)(?P<v>{_PLACE_ZH})"),
    _rule("user_hometown", rf"(?i:\bi'm from|\bi am from|\bi come from|\bi grew up in)\s+"
                           rf"(?P<v>{_PLACE_EN})"),
    _rule("user_hometown", rf"我(?:来自|老家在|老家是|的老家在)(?P<v>{_PLACE_ZH})"),
    _rule("user_work_location", rf"(?i:\bi work in)\s+(?P<v>{_PLACE_EN})"),
    _rule("user_work_location", rf"我(?:现在|目前)?在(?P<v>{_PLACE_ZH})(?:工作|上班)"),
    _rule("user_employer", rf"(?i:\bi work (?:at|for))\s+(?P<v>{_PLACE_EN})"),
    _rule("user_job", r"(?i:\bi work as (?:an?|the)|\bmy (?:job|profession|occupation) is(?: an?)?)"
                      r"\s+(?P<v>[a-zA-Z][a-zA-Z -]{1,40}?)"
                      r"(?=\s*(?:[,.!;]|$| and | at | in | for ))"),
    _rule("user_job", rf"{_I_AM} (?:an?|the) (?P<v>[a-zA-Z][a-zA-Z -]{{1,40}}?)"
                      r"(?=\s*(?:[,.!;]|$| and | at | in | for | with | from ))", 0.65),
    _rule("user_job", rf"我(?:是|做)(?:一名|一个|一位|名|个)?(?P<v>[\u4e00-\u9fffA-Za-z]{{0,8}}?"
                      rf"(?:{_JOBS_ZH})){_STOP_ZH}"),
    _rule("user_job", rf"我的(?:职业|工作)是(?P<v>{_CLAUSE}{{2,15}})"),
    _rule("user_age", rf"{_I_AM} (?P<v>[0-9]{{1,3}})(?: years? old|-year-old)"),
    _rule("user_age", r"(?i:\bmy age is)\s+(?P<v>[0-9]{1,3})"),
    _rule("user_age", r"我(?:今年|现在)?(?P<v>[0-9]{1,3})周?岁"),
    _rule("user_birthday", rf"(?i:\bmy birthday is(?: on)?|\bmy date of birth is|\bi was born on"
                           rf"|\bi was born in)\s+(?P<v>{DATE_EN})"),
    _rule("user_birthday", rf"我的?(?:生日|出生日期)(?:是|在)?(?P<v>{DATE_ZH})"),
    _rule("user_birthday", rf"我(?:是|于|出生于)?(?P<v>{DATE_ZH})出生"),
    _rule("user_salary", rf"(?i:\bmy (?:monthly |annual )?salary is|\bi (?:earn|make))\s+"
                         rf"(?P<v>{AMOUNT})"),
    _rule("user_salary", rf"(?:月薪|工资|年薪|薪水)(?:是|为|每月|有)?\s*(?P<v>{AMOUNT_ZH})"),
    # contracts, money owed, employment (legal consultations)
    _rule("contract_date", r"(?i:(?:contract|agreement|lease) (?:was |is |had been )?"
                           r"(?:signed|concluded|dated|executed))(?: on| in)?"
                           rf" (?P<v>{DATE_EN})", 0.8),
    _rule("contract_date", r"(?i:\b(?:we|i) signed (?:the |a |an |our |my )?(?:[a-z]+ ){0,2}"
                           rf"(?:contract|agreement|lease)) (?:on|in) (?P<v>{DATE_EN})", 0.8),
    _rule("contract_date", rf"(?P<v>{DATE_ZH}){_CLAUSE}{{0,15}}?签(?:订|署|的|了){_CLAUSE}{{0,10}}?"
                           r"(?:合同|协议)", 0.8),
    _rule("contract_date", rf"(?:合同|协议)(?:是|于|在)?(?P<v>{DATE_ZH})签(?:订|署|的)", 0.8),
    _rule("contract_date", rf"(?:合同|协议)[^。；！？]*?(?P<v>{DATE_ZH})签(?:订|署)", 0.75),
    _rule("contract_amount", r"(?i:contract (?:amount|price|value|sum) (?:is|was|of)|(?:contract"
                             rf"|agreement) (?:is |was )?(?:worth|for)) (?P<v>{AMOUNT})", 0.8),
    _rule("contract_amount", rf"(?:合同|协议)(?:总)?(?:金额|价款|总价|价格|标的额?)(?:是|为|共|：|:)?"
                             rf"\s*(?P<v>{AMOUNT_ZH})", 0.8),
    _rule("contract_term", r"(?i:(?:lease|contract|agreement)(?: term)? (?:is|was|runs) for"
                           rf"|\ba term of|\bthe term is) (?P<v>{DURATION})", 0.8),
    _rule("contract_term", rf"(?:租期|租赁期限?|合同期限?|借款期限|期限)(?:是|为|：|:)?\s*"
                           rf"(?P<v>{DURATION})", 0.8),
    _rule("contract_end_date", r"(?i:(?:contract|lease|agreement) (?:expires|ends|runs until"
                               rf"|will expire|will end))(?: on| in)? (?P<v>{DATE_EN})", 0.8),
    _rule("contract_end_date", rf"(?:合同|租期|协议)(?:将)?(?:于|在)?(?P<v>{DATE_ZH})(?:到期|结束|届满)",
          0.8),
    _rule("contract_penalty", r"(?i:(?:penalty|liquidated damages|late fee)(?: for [a-z]+)?"
                              rf" (?:is|was|of)|\ba penalty of) (?P<v>{_CLAUSE}{{1,60}})", 0.75),
    _rule("contract_penalty", rf"违约金(?:是|为|：|:|约定为|约定是)?\s*(?P<v>{_CLAUSE}{{1,30}})", 0.75),
    _rule("deposit_amount", r"(?i:(?:security )?deposit (?:is|was|of)|\bi paid a deposit of)"
                            rf" (?P<v>{AMOUNT})", 0.8),
    _rule("deposit_amount", rf"(?:押金|定金|订金|保证金)(?:是|为|：|:|交了|付了)?\s*(?P<v>{AMOUNT_ZH})",
          0.8),
    _rule("rent_amount", rf"(?i:\b(?:the |my )?(?:monthly )?rent is) (?P<v>{AMOUNT})", 0.8),
    _rule("rent_amount", rf"(?:月租|租金|房租)(?:是|为|：|:)?(?:每月|每个月)?\s*(?P<v>{AMOUNT_ZH})", 0.8),
    _rule("payment_deadline", r"(?i:(?:must|have to|has to|should|needs? to) (?:be )?(?:pay|paid"
                              r"|repay|repaid)(?: [a-z]+){0,3}? by|\b(?:payment )?deadline is"
                              rf"|\bdue (?:on|by)) (?P<v>{DATE_EN})", 0.75),
    _rule("payment_deadline", rf"(?P<v>{DATE_ZH})(?:之前|以前|前)(?:要|须|必须|应)?(?:付|支付|还|归还|"
                              r"偿还|付清|还清)", 0.75),
    _rule("payment_deadline", rf"(?:还款|付款|支付)(?:期限|日期|截止日)(?:是|为)?(?P<v>{DATE_ZH})", 0.75),
    _rule("debt_amount", r"(?i:\bi owe(?: [a-z]+){0,3}?|\bi borrowed(?: [a-z]+){0,3}?"
                         rf"|\bi have a debt of) (?P<v>{AMOUNT})", 0.75),
    _rule("debt_amount", rf"我(?:欠|向{_CLAUSE}{{1,6}}?借了?|借了){_CLAUSE}{{0,6}}?(?P<v>{AMOUNT_ZH})",
          0.75),
    _rule("amount_owed_to_user", r"(?i:\b(?:he|she|they|[a-z]+) (?:still )?owes? me"
                                 rf"|\bi lent(?: [a-z]+){{0,3}}?) (?P<v>{AMOUNT})", 0.75),
    _rule("amount_owed_to_user", rf"(?:还?欠我|借了我|向我借了?|我借给了?{_CLAUSE}{{1,6}}?)"
                                 rf"{_CLAUSE}{{0,6}}?(?P<v>{AMOUNT_ZH})", 0.75),
    _rule("unpaid_wages", rf"拖欠(?:了)?我?{_CLAUSE}{{0,4}}?(?P<v>{AMOUNT_ZH}|{_N}{{1,3}}个月的?工资)",
          0.75),
    _rule("employment_start_date", r"(?i:\bi (?:started|joined|began)(?: working)?(?: there| at"
                                   r"(?: [A-Za-z]+){1,3}| the company)?) (?:on|in)"
                                   rf" (?P<v>{DATE_EN})"),
    _rule("employment_start_date", rf"我?(?:是|于|在)?(?P<v>{DATE_ZH})入职"),
    _rule("termination_date", r"(?i:\bi was (?:fired|dismissed|laid off|let go|terminated)"
                              rf"(?: [a-z]+){{0,3}}?) (?:on|in) (?P<v>{DATE_EN})"),
    _rule("termination_date", rf"(?P<v>{DATE_ZH})(?:被|遭)?(?:公司)?(?:辞退|解雇|开除|裁员|解除劳动合同)"),
    # how the user wants answers
    _rule("preferred_language", r"(?i:\b(?:answer|reply|respond|write|speak|talk to me) in"
                                r"|\bi prefer (?:answers |replies )?in) (?P<v>(?i:English|Chinese"
                                r"|Mandarin|Cantonese|French|German|Spanish|Japanese|Korean"
                                r"|Russian|Italian|Portuguese))\b", 0.85),
    _rule("preferred_language", r"(?:用|使用|以)(?P<v>中文|英文|英语|汉语|日语|日文|韩语|法语|德语"
                                r"|普通话|粤语)(?:来)?(?:回答|回复|交流|说|写|跟我)", 0.85),
    _rule("preferred_answer_length", r"(?i:\bbe (?:brief|concise)|\bkeep it (?:short|brief)"
                                     r"|\b(?:short|brief|concise) answers?\b|\banswer briefly)",
          0.8, "brief"),
    _rule("preferred_answer_length", r"(?i:\bin (?:more )?detail\b|\bmore detail|\bdetailed"
                                     r" (?:answers?|explanations?)|\bbe thorough)", 0.8,
          "detailed"),
    _rule("preferred_answer_length", r"(?:简短|简洁|简单)(?:一点|一些|些|点)?地?(?:回答|说|回复)"
                                     r"|(?:回答|说)得?(?:简短|简洁|简单)|少说点|说重点", 0.8, "简短"),
    _rule("preferred_answer_length", r"详细(?:一点|一些|些|点|地|说明|解释|回答|说|讲)"
                                     r"|具体(?:一点|一些|些|点)|展开(?:说|讲)", 0.8, "详细"),
)
_REL_EN = "|".join(sorted(map(re.escape, _RELATIONS_EN), key=len, reverse=True))
_REL_ZH = "|".join(sorted(_RELATIONS_ZH, key=len, reverse=True))
_NAMED = (
    # "my cat is named Quixote", "My dog's name is Rex", "my son, called Tom,"
    (re.compile(rf"(?i:\b(?:my|our) (?:[a-z]+ ){{0,2}}?(?P<r>{_REL_EN})(?:'s name is|'s name's"
                r"| is named| is called|, named|, called| named| called|'s called))"
                rf"\s+(?P<v>{_NAME_EN})"), _RELATIONS_EN),
    # "I have a cat named Quixote", "we've got a dog called Rex"
    (re.compile(rf"(?i:\b(?:i|we) (?:have|had|'ve got|have got|got|adopted) (?:an?|two|three) "
                rf"(?:[a-z]+ ){{0,2}}?(?P<r>{_REL_EN}) (?:named|called))\s+(?P<v>{_NAME_EN})"),
     _RELATIONS_EN),
    # "我的猫叫小白", "我家狗狗名叫旺财", "我儿子的名字是张小明"
    (re.compile(rf"我(?:的|家的?|们家的?)?(?P<r>{_REL_ZH})(?:的名字(?:是|叫)|名字叫|叫做|名叫|叫)"
                rf"(?P<v>{_NAME_ZH})"), _RELATIONS_ZH),
)
_LIKES = (
    (re.compile(r"(?i:\bi (?:really )?(?:prefer|like|love|enjoy)) (?P<v>[^,.;!?\n]{2,40})"),
     "prefers"),
    (re.compile(r"(?i:\bi (?:really )?(?:don't|do not) (?:like|enjoy)|\bi (?:hate|dislike))"
                r" (?P<v>[^,.;!?\n]{2,40})"), "dislikes"),
    (re.compile(rf"我(?:很|非常|特别|比较|更)?(?:喜欢|偏好|爱)(?P<v>{_CLAUSE}{{1,20}})"), "prefers"),
    (re.compile(rf"我(?:不喜欢|讨厌)(?P<v>{_CLAUSE}{{1,20}})"), "dislikes"),
)
# How much, not what: "I really like X a lot" likes X (the same thing as "I like X").
_INTENSIFIER = re.compile(r"\s+(?:a lot|a great deal|very much|so much|too much|a bit|"
                          r"too|as well|so|lots)$", re.I)
_DIGEST_CHARS = 8
_SLUG_BREAKS = re.compile(r"[\W_]+")


def value_key(prefix: str, value: str) -> str:
    """`<prefix>_<slug of the whole value>`: the key says what the value holds, so two
    statements share a key only if they state the same thing (case and punctuation aside).
    A slug too long for a key is cut and ends in a digest of the whole value: values that
    start alike still get keys of their own."""
    slug = _SLUG_BREAKS.sub("_", value.strip().lower()).strip("_")  # normalize_key, uncut
    room = MAX_KEY_LENGTH - len(prefix) - 1
    if len(slug) > room:
        digest = hashlib.sha256(slug.encode()).hexdigest()[:_DIGEST_CHARS]
        slug = slug[:room - _DIGEST_CHARS - 1].rstrip("_") + "_" + digest
    return f"{prefix}_{slug}"


def is_value_key(key: str) -> bool:
    """A key made by `value_key` (a free-form like or dislike): it names its value."""
    return key.startswith(("prefers_", "dislikes_"))


_JOB_WORDS = frozenset((
    "lawyer attorney paralegal judge doctor physician surgeon nurse dentist pharmacist teacher "
    "professor lecturer student engineer developer programmer designer manager accountant "
    "consultant analyst scientist researcher writer journalist editor artist architect chef "
    "pilot driver farmer founder ceo cto entrepreneur freelancer landlord tenant contractor "
    "retiree officer clerk nurse therapist psychologist economist banker trader").split())
_NOT_NAMES = frozenset((
    "Chinese American British English French German Japanese Korean Indian Canadian Sorry "
    "Fine Good Okay Ok Here Back Not Sure Glad Happy Sad Tired Busy Ready Done Afraid Back "
    "Just Still Also Really Very So Going Looking Trying Confused Worried New Married Single "
    "Pregnant Interested Curious Learning Working Living Thinking").split())
_QUESTION_START = re.compile(r"(?i:^(?:do|does|did|am|is|are|can|could|should|would|what|where"
                             r"|when|who|why|how)\b)|^(?:如果|假如|要是|假设)|(?i:^if\b)")
_SENTENCES = re.compile(r"(?<=[。！？；!?;\n])|(?<=\.)(?=\s)")
# Chinese drops a repeated subject: in "我叫张三，今年35岁，住在北京" the later clauses are about
# 我 too. A clause starting like that gets its 我 back when the clause before was about 我.
_ZH_DROPPED_SUBJECT = re.compile(r"今年|现在|目前|住在|居住在|来自|老家|出生于|欠|是一名|是一位"
                                 r"|在[^，。；]{1,15}?(?:工作|上班)")


def sentences(text: str) -> list[str]:
    """`text` cut into sentences (decimals like 3.5 and dates like 2023.3.1 stay whole)."""
    return [s.strip() for s in _SENTENCES.split(text) if s.strip()]


def _with_subject(sentence: str) -> str:
    clauses, about_me = [], False
    for clause in re.split(r"(?<=[，,])", sentence):
        if clause.startswith("我") and not clause.startswith("我们"):
            about_me = True
        elif about_me and _ZH_DROPPED_SUBJECT.match(clause):
            clause = "我" + clause
        else:
            about_me = False
        clauses.append(clause)
    return "".join(clauses)


def _is_statement(sentence: str) -> bool:
    return not (sentence.rstrip().endswith(("?", "？", "吗")) or _QUESTION_START.search(sentence))


def _accepted(key: str, value: str, rule: Rule, match: re.Match[str]) -> bool:
    if key == "user_name" and rule.confidence < 0.7:
        return value.split()[0] not in _NOT_NAMES
    if key == "user_job" and match.group(0).lower().startswith(("i'm", "i am")):
        last = value.split()[-1].lower()
        return last in _JOB_WORDS or last.endswith(("ist", "ian", "eer"))
    if key == "user_age":
        return 0 < int(value) < 130
    return True


MAX_STATEMENT_CHARS = 20_000
"""Self-statements are looked for in a message's first this many characters: past them it is a
pasted document, not the user talking about themselves, and the work per message stays bounded
(a 200 KB message of 200,000 one-character "sentences" took seconds, on the serving loop in
the background and inline recorder modes)."""
_LETTER = re.compile(r"[^\W\d_]")


@lru_cache(maxsize=64)
def statements(text: str) -> tuple[tuple[str, str, float], ...]:
    """(key, value, confidence) for each clear self-statement in `text`, in text order, after
    redaction; a key stated twice gives its last value. Cached: the fact extractor and the
    profile read the same new messages."""
    found: dict[str, tuple[int, str, float]] = {}
    offset = 0
    for sentence in sentences(redact(text[:MAX_STATEMENT_CHARS])):
        offset += 1
        if not _LETTER.search(sentence) or not _is_statement(sentence):
            continue
        sentence = _with_subject(sentence)
        hits: list[tuple[int, str, str, float]] = []
        for rule in _RULES:
            for match in rule.pattern.finditer(sentence):
                value = clean_value(rule.value or match.group("v")).rstrip(",.;:，。；：、 ")
                if value and not has_placeholder(value) and _accepted(rule.key, value, rule,
                                                                      match):
                    hits.append((match.start(), rule.key, value, rule.confidence))
        for pattern, relations in _NAMED:
            for match in pattern.finditer(sentence):
                value = clean_value(match.group("v")).rstrip(",.;:，。；：、 ")
                relation = relations.get(match.group("r").lower())
                if relation and value and not has_placeholder(value) \
                        and value.split()[0] not in _NOT_NAMES:
                    hits.append((match.start(), f"{relation}_name", value, 0.75))
        for pattern, prefix in _LIKES:
            for match in pattern.finditer(sentence):
                value = _INTENSIFIER.sub("", clean_value(match.group("v")))
                if normalize_key(value) and not has_placeholder(value) and value.lower() not in (
                        "it", "that", "this", "them", "you", "to"):
                    hits.append((match.start(), value_key(prefix, value), value, 0.6))
        for position, key, value, confidence in sorted(hits):
            found.pop(key, None)  # re-insert: the order is that of the last statement
            found[key] = (offset * 100_000 + position, value, confidence)
    return tuple((key, value, confidence) for key, (_, value, confidence)
                 in sorted(found.items(), key=lambda item: item[1][0]))


def fact_type(key: str) -> str:
    if is_value_key(key):
        return "preference"
    return _META.get(key, ("fact", 0.5))[0]


def importance(key: str) -> float:
    return _META.get(key, ("fact", 0.5))[1]


def extract_facts(messages: Sequence[StoredMessage]) -> tuple[Fact, ...]:
    """Facts stated by the user in `messages` (other roles are ignored), in message order,
    each sourced from its message and stamped with the message's time."""
    facts: list[Fact] = []
    for stored in messages:
        if stored.message.role != "user":
            continue
        for key, value, confidence in statements(stored.message.text):
            facts.append(Fact(key=key, value=value, type=fact_type(key),
                              importance=importance(key), confidence=confidence,
                              source_ids=(stored.id,), created_at=stored.created_at,
                              updated_at=stored.created_at))
    return tuple(facts)
