"""PII redaction (gateway.core.pii): what memory stores and recalls has no identifiers."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.core.pii import cn_id_checksum_ok, find_pii, luhn_ok, redact

CN_ID = "11010519491231002X"        # valid checksum (GB 11643 sample)
CN_ID_BAD = "110105194912310021"    # same digits, wrong check character
VISA = "4111 1111 1111 1111"        # Luhn-valid test card
UNIONPAY = "6222021234567890128"    # 19 digits, Luhn-valid


def test_checks_used_to_limit_false_positives():
    assert cn_id_checksum_ok(CN_ID) and not cn_id_checksum_ok(CN_ID_BAD)
    assert luhn_ok("4111111111111111") and luhn_ok(UNIONPAY) and not luhn_ok("4111111111111112")


@pytest.mark.parametrize("text, expected", [
    # Chinese
    (f"我的身份证号是{CN_ID}，请保密", "我的身份证号是[ID_NUMBER]，请保密"),
    ("身份证：330106850101123", "身份证：[ID_NUMBER]"),  # legacy 15-digit
    ("我的手机号是13812345678，有事打给我", "我的手机号是[PHONE]，有事打给我"),
    ("电话 +86 138-1234-5678 或 0086 139 1234 5678", "电话 [PHONE] 或 [PHONE]"),
    ("办公室座机010-62345678", "办公室座机[PHONE]"),
    ("手机号１３８１２３４５６７８（全角）", "手机号[PHONE]（全角）"),
    (f"工资卡号{UNIONPAY}", "工资卡号[BANK_CARD]"),
    ("邮箱是zhang.san@example.com。", "邮箱是[EMAIL]。"),
    # English
    ("Reach me at alice+memo@mail.example.co.uk or +1 (415) 555-2671.",
     "Reach me at [EMAIL] or [PHONE]."),
    ("My cell is 415-555-2671 and my UK line +44 20 7946 0958",
     "My cell is [PHONE] and my UK line [PHONE]"),
    (f"Card {VISA}, exp 12/27", "Card [BANK_CARD], exp 12/27"),
    ("Amex 3782-822463-10005", "Amex [BANK_CARD]"),
    ("SSN 123-45-6789", "SSN [ID_NUMBER]"),
])
def test_identifiers_are_replaced_by_typed_placeholders(text, expected):
    assert redact(text) == expected


@pytest.mark.parametrize("text", [
    "合同于2023-03-01签订，金额30万元，违约金为合同金额的20%。",
    "2023年3月1日至2025年2月28日，月租5,000元，押金10000元",
    "We signed on 2023-03-01 2024-05-06 for $1,250,000.00 in 2024.",
    "订单号202403150012345，快递单号 SF1234567890",   # no ID/card/phone shape
    "Order 4111111111111112 was refunded",            # fails Luhn: not a card
    f"ID {CN_ID_BAD} is mistyped",                     # fails the ID checksum
    "Version 1.2.3, port 8080, 3.14159, +5 points, 1e10",
    "Call me at noon on 12/25; room 1234-5678",
])
def test_dates_amounts_and_numbers_without_pii_shape_stay(text):
    assert redact(text) == text


def test_find_pii_reports_kinds_and_original_text_in_order():
    text = f"mail a@b.io, phone 13912345678, id {CN_ID}, card {VISA}"
    spans = find_pii(text)
    assert [(s.kind, s.text) for s in spans] == [
        ("EMAIL", "a@b.io"), ("PHONE", "13912345678"), ("ID_NUMBER", CN_ID),
        ("BANK_CARD", VISA)]
    assert all(text[s.start:s.end] == s.text for s in spans)


def test_an_id_number_is_not_also_read_as_a_card_or_a_phone():
    assert [s.kind for s in find_pii(CN_ID.replace("X", "0") + " " + CN_ID)] == ["ID_NUMBER"]


_PII_ALPHABET = st.sampled_from(list("0123456789 -+()@.xX") + ["a", "b", "中", "\n"])


@settings(max_examples=300, deadline=None)
@given(st.text(_PII_ALPHABET, max_size=60) | st.text(max_size=80))
def test_redaction_is_idempotent(text):
    once = redact(text)
    assert redact(once) == once


@settings(max_examples=300, deadline=None)
@given(st.text(st.characters(blacklist_categories=("Nd",), blacklist_characters="@＠"),
               max_size=120))
def test_text_without_digits_or_at_sign_is_unchanged(text):
    assert redact(text) == text
    assert find_pii(text) == []


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["13812345678", CN_ID, VISA, "a@b.co", "2023-03-01", "5万元"]),
                max_size=8), st.sampled_from([" ", "，", "及", " and ", "\n"]))
def test_no_identifier_survives_among_others(parts, separator):
    out = redact(separator.join(parts))
    for secret in ("13812345678", CN_ID, VISA, "a@b.co"):
        assert secret not in out
