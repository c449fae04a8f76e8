"""Heuristic fact extraction (gateway.core.memory.extraction): clear self-statements, EN and ZH."""

from __future__ import annotations

import pytest

from gateway.core.memory.extraction import (MAX_STATEMENT_CHARS, VOCABULARY, extract_facts,
                                             statements, value_key)
from gateway.core.memory.facts import MAX_KEY_LENGTH
from gateway.core.messages import Message, chain


def values(text: str) -> dict[str, str]:
    return {key: value for key, value, _ in statements(text)}


@pytest.mark.parametrize("text, expected", [
    ("Hi, I'm Alice. I live in New York City and I work as a software engineer.",
     {"user_name": "Alice", "user_location": "New York City", "user_job": "software engineer"}),
    ("My name is Bob Smith, I am 35 years old. I'm a lawyer.",
     {"user_name": "Bob Smith", "user_age": "35", "user_job": "lawyer"}),
    ("I'm from Lyon, France. My birthday is March 5, 1990.",
     {"user_hometown": "Lyon, France", "user_birthday": "March 5, 1990"}),
    ("I work at Acme Corp. My monthly salary is $8,000.",
     {"user_employer": "Acme Corp", "user_salary": "$8,000"}),
    ("Please answer briefly. I prefer Python. Answer in English.",
     {"preferred_answer_length": "brief", "prefers_python": "Python",
      "preferred_language": "English"}),
])
def test_english_self_statements(text, expected):
    assert values(text) == expected


@pytest.mark.parametrize("text, expected", [
    ("我叫张三，今年35岁，住在北京市朝阳区。",
     {"user_name": "张三", "user_age": "35", "user_location": "北京市朝阳区"}),
    ("我的名字是王小明。我是一名律师，我在上海工作。",
     {"user_name": "王小明", "user_job": "律师", "user_work_location": "上海"}),
    ("我的生日是1990年3月5日，我来自成都。",
     {"user_birthday": "1990年3月5日", "user_hometown": "成都"}),
    ("请用中文回答，详细一点。我喜欢喝茶。",
     {"preferred_language": "中文", "preferred_answer_length": "详细", "prefers_喝茶": "喝茶"}),
])
def test_chinese_self_statements(text, expected):
    assert values(text) == expected


@pytest.mark.parametrize("text, expected", [
    ("my cat is named Quixote", {"cat_name": "Quixote"}),
    ("My dog's name is Rex.", {"dog_name": "Rex"}),
    ("Our new puppy is called Biscuit!", {"dog_name": "Biscuit"}),
    ("I have a cat named Quixote and I live in Lisbon.",
     {"cat_name": "Quixote", "user_location": "Lisbon"}),
    ("My son is called Tom and my wife's name is Anna Lee.",
     {"son_name": "Tom", "wife_name": "Anna Lee"}),
    ("我的猫叫小白", {"cat_name": "小白"}),
    ("我家狗狗叫旺财。", {"dog_name": "旺财"}),
    ("我儿子的名字是张小明，我妈妈叫李华。", {"son_name": "张小明", "mother_name": "李华"}),
])
def test_names_of_pets_and_family_members(text, expected):
    assert values(text) == expected
    assert set(expected) <= VOCABULARY


@pytest.mark.parametrize("text", [
    "What is my cat called?", "我的猫叫什么名字？", "my cat is named after a book",
    "我的儿子是医生。", "My cat is called lazy by everyone.",
])
def test_questions_and_descriptions_of_pets_and_family_give_no_name(text):
    assert not [k for k in values(text) if k.endswith("_name")]


@pytest.mark.parametrize("text", [
    "I'm tired.", "I'm sorry, I'm Chinese.", "Do I live in Paris?", "If I live in Rome, what then?",
    "I'm a bit confused about this.", "他今年40岁，住在上海。", "我住在北京吗？", "如果我住在北京呢",
    "What is the contract amount?", "Where is my name written?",
])
def test_questions_conditionals_and_non_statements_give_nothing(text):
    assert statements(text) == ()


def test_a_phone_number_is_never_a_fact_value():
    assert values("我的电话是13812345678，我叫李四。") == {"user_name": "李四"}
    assert values("My name is Ann and my email is a@b.io. I live in Oslo.") == \
        {"user_name": "Ann", "user_location": "Oslo"}
    assert values("My email is ann@example.org") == {}
    assert values("我的名字是13812345678") == {}
    assert values("call me +1 415 555 2671") == {}


def test_a_dropped_chinese_subject_is_restored_only_after_a_clause_about_me():
    assert values("我叫张三，他今年40岁，住在上海。") == {"user_name": "张三"}
    assert values("律师您好，我叫陈静，住在杭州。") == {"user_name": "陈静", "user_location": "杭州"}


def test_a_key_stated_twice_in_one_message_keeps_the_last_value():
    assert values("I live in Paris. Actually, I live in Berlin now.") == \
        {"user_location": "Berlin"}


def test_facts_come_from_user_messages_with_their_ids_times_and_vocabulary_keys():
    stored = chain(None, [Message.of("user", "I live in Paris."),
                          Message.of("assistant", "My name is Assistant. I live in the cloud."),
                          Message.of("user", "我叫张三")], created_at=123.0)
    facts = extract_facts(stored)
    assert [(f.key, f.value, f.source_ids) for f in facts] == [
        ("user_location", "Paris", (stored[0].id,)), ("user_name", "张三", (stored[2].id,))]
    assert all(f.created_at == f.updated_at == 123.0 and f.key in VOCABULARY for f in facts)
    assert all(0 < f.importance <= 1 and 0 < f.confidence <= 1 for f in facts)


# -- a legal consultation: facts from the early turns must survive to the late ones ----------

LEGAL_ZH = [
    "律师您好，我叫陈静，住在杭州市西湖区，想咨询一下房屋租赁纠纷。",
    "我们是2023年3月1日和房东签订的租赁合同，租期两年。",
    "月租是4500元，押金9000元，合同金额是108000元。",
    "合同里写着违约金为两个月租金。",
    "房东说合同将于2025年2月28日到期，但现在要求我提前搬走。",
    "另外房东还欠我三万元装修款，应在2024年6月30日前还清。",
    "我的电话是13912345678，身份证号11010519491231002X，方便您联系。",
    "我是一名会计，平时工作很忙，请简短回答。",
    "房东一直拖欠了我三个月的押金退还，我很着急。",
    "这种情况我能要求赔偿吗？",
]
LEGAL_EN = [
    "Hello, my name is Daniel Park and I live in Austin.",
    "The lease was signed on March 1, 2023 with my landlord.",
    "The lease is for two years and the monthly rent is $2,400.",
    "The security deposit is $4,800.",
    "The contract amount is $57,600 in total.",
    "The late fee is 5% of the monthly rent.",
    "My landlord owes me $3,000 for repairs and he must repay it by 2024-06-30.",
    "The lease expires on February 28, 2025.",
    "You can reach me at daniel@example.com or +1 512 555 0199.",
    "Can he evict me before the lease ends?",
]


def test_chinese_legal_consultation_yields_its_dates_amounts_and_terms():
    stored = chain(None, [Message.of("user", text) for text in LEGAL_ZH], created_at=1.0)
    found = {f.key: f.value for f in extract_facts(stored)}
    for key, value in [("contract_date", "2023年3月1日"), ("contract_amount", "108000元"),
                       ("contract_term", "两年"), ("contract_penalty", "两个月租金"),
                       ("amount_owed_to_user", "三万元"), ("payment_deadline", "2024年6月30日"),
                       ("rent_amount", "4500元"), ("deposit_amount", "9000元"),
                       ("contract_end_date", "2025年2月28日"), ("user_name", "陈静"),
                       ("user_location", "杭州市西湖区"), ("user_job", "会计"),
                       ("preferred_answer_length", "简短")]:
        assert found.get(key) == value, (key, found)
    assert not any("139" in v or "1101" in v for v in found.values())


def test_english_legal_consultation_yields_its_dates_amounts_and_terms():
    stored = chain(None, [Message.of("user", text) for text in LEGAL_EN], created_at=1.0)
    found = {f.key: f.value for f in extract_facts(stored)}
    expected = {"user_name": "Daniel Park", "user_location": "Austin",
                "contract_date": "March 1, 2023", "contract_term": "two years",
                "rent_amount": "$2,400", "deposit_amount": "$4,800",
                "contract_amount": "$57,600", "contract_penalty": "5% of the monthly rent",
                "amount_owed_to_user": "$3,000", "payment_deadline": "2024-06-30",
                "contract_end_date": "February 28, 2025"}
    assert {k: found.get(k) for k in expected} == expected
    assert not any("@" in v or "555" in v for v in found.values())


def test_near_duplicate_likes_get_keys_that_name_their_own_values():
    # Once both keyed by their first four words (`prefers_kanary7_hiking_in_the`): the second
    # statement overwrote the first under a key that named neither.
    hills = statements("I really like Kanary7 hiking in the hills a lot.")
    alps = statements("I really like Kanary7 hiking in the alps a lot.")
    assert hills == (("prefers_kanary7_hiking_in_the_hills", "Kanary7 hiking in the hills", 0.6),)
    assert alps == (("prefers_kanary7_hiking_in_the_alps", "Kanary7 hiking in the alps", 0.6),)
    # How much is not what: the same like, said more or less strongly, is one fact.
    assert statements("I like Kanary7 hiking in the hills.") == hills
    assert statements("我很喜欢北京烤鸭和上海小笼包")[0][0] == "prefers_北京烤鸭和上海小笼包"


def test_a_key_too_long_for_its_value_ends_in_a_digest_of_the_whole_value():
    a, b = value_key("prefers", "x" * 70 + " one"), value_key("prefers", "x" * 70 + " two")
    assert a != b and len(a) <= MAX_KEY_LENGTH and len(b) <= MAX_KEY_LENGTH
    assert a == value_key("prefers", "X" * 70 + " ONE")  # the same value, the same key


def test_statements_are_looked_for_in_a_messages_first_characters_only():
    said = "My name is Zed. "
    padding = "We talked about the weather for a while. " * (MAX_STATEMENT_CHARS // 40)
    assert values(said + padding) == {"user_name": "Zed"}
    assert values(padding + said) == {}  # past the bound: a pasted document, not the user


def test_punctuation_without_letters_is_no_statement():
    assert statements(";" * 50_000 + "My name is Zed.") == ()  # past the bound, and no letters
    assert values("!!!;;;" * 10 + " My name is Zed.") == {"user_name": "Zed"}
