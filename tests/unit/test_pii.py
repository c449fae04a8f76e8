"""PII redaction (gateway.core.text.pii): what memory stores and recalls has no identifiers."""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from gateway.core.text.pii import cn_id_checksum_ok, find_pii, iban_ok, luhn_ok, redact

CN_ID = "11010519491231002X"        # valid checksum (GB 11643 sample)
CN_ID_BAD = "110105194912310021"    # same digits, wrong check character
VISA = "4111 1111 1111 1111"        # Luhn-valid test card
UNIONPAY = "6222021234567890128"    # 19 digits, Luhn-valid
IBAN_DE = "DE89 3704 0044 0532 0130 00"  # the registry's examples: valid mod-97
IBAN_GB = "GB82WEST12345698765432"


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


def test_iban_check_is_mod_97_with_the_country_length():
    assert iban_ok("DE89370400440532013000") and iban_ok(IBAN_GB)
    assert iban_ok("FR1420041010050500013M02606") and iban_ok("nl91abna0417164300")
    assert not iban_ok("DE88370400440532013000")       # check digits off by one
    assert not iban_ok("DE8937040044053201300")        # a character short for DE
    assert not iban_ok("ZZ89370400440532013000")       # no such country


# True positives: each text, and what memory stores of it.
TRUE_POSITIVES = [
    # IBAN: compact or grouped, whatever follows, Chinese context
    (f"IBAN {IBAN_DE} EUR", "IBAN [IBAN] EUR"),
    ("pay to GB82 WEST 1234 5698 7654 32.", "pay to [IBAN]."),
    ("我的IBAN是DE89370400440532013000，请转账", "我的IBAN是[IBAN]，请转账"),
    ("IBAN: FR14 2004 1010 0505 0001 3M02 606", "IBAN: [IBAN]"),
    ("Konto NL91ABNA0417164300 bitte", "Konto [IBAN] bitte"),
    ("CH93 0076 2011 6238 5295 7", "[IBAN]"),
    # IP addresses
    ("server at 203.0.113.7:8080", "server at [IP_ADDRESS]:8080"),
    ("客户IP是 58.246.10.3，", "客户IP是 [IP_ADDRESS]，"),
    ("home router 192.168.1.23", "home router [IP_ADDRESS]"),
    ("IPv6 2001:db8::8a2e:370:7334 here", "IPv6 [IP_ADDRESS] here"),
    ("link fe80::1ff:fe23:4567:890a", "link [IP_ADDRESS]"),
    ("2001:0db8:85a3:0000:0000:8a2e:0370:7334", "[IP_ADDRESS]"),
    # SWIFT/BIC: after the keyword, or alone in the strict 11-character form
    ("SWIFT: DEUTDEFF", "SWIFT: [SWIFT_BIC]"),
    ("BIC DEUTDEFF500", "BIC [SWIFT_BIC]"),
    ("银行SWIFT代码BKCHCNBJ", "银行SWIFT代码[SWIFT_BIC]"),
    ("use CHASUS33XXX please", "use [SWIFT_BIC] please"),
    ("swift code is bofaus3n? no: BOFAUS3N", "swift code is bofaus3n? no: [SWIFT_BIC]"),
    # passports: only near a keyword
    ("my passport number is E12345678", "my passport number is [PASSPORT]"),
    ("护照号码：G12345678", "护照号码：[PASSPORT]"),
    ("Reisepass-Nr. C01X00T47", "Reisepass-Nr. [PASSPORT]"),
    ("パスポート番号 TK1234567", "パスポート番号 [PASSPORT]"),
    ("Passport: 123456789", "Passport: [PASSPORT]"),
    # national identity and tax numbers (gateway/core/text/national_ids.py), published examples
    # where there are (codice fiscale, CPF, DNI/NIE, SIN, Steuer-ID, My Number)
    ("NI number AB 12 34 56 C on the form", "NI number [ID_NUMBER] on the form"),
    ("My Aadhaar is 2345 6789 0124.", "My Aadhaar is [ID_NUMBER]."),
    ("आधार: 234567890124", "आधार: [ID_NUMBER]"),
    ("PAN ABCPE1234F", "PAN [ID_NUMBER]"),
    ("DNI 12345678Z, NIE X1234567L", "DNI [ID_NUMBER], NIE [ID_NUMBER]"),
    ("n° de sécu 1 85 05 78 006 084 91", "n° de sécu [ID_NUMBER]"),
    ("codice fiscale RSSMRA85T10A562S", "codice fiscale [ID_NUMBER]"),
    ("주민등록번호 850101-1234566", "주민등록번호 [ID_NUMBER]"),
    ("CPF 123.456.789-09", "CPF [ID_NUMBER]"),
    ("SIN 046 454 286", "SIN 046 454 286"),  # no SIN starts with 0: issued ones never do
    ("my SIN is 130 692 544", "my SIN is [ID_NUMBER]"),
    ("Steuer-ID: 86095742719", "Steuer-ID: [ID_NUMBER]"),
    ("マイナンバーは123456789018です", "マイナンバーは[ID_NUMBER]です"),
    # the earlier kinds keep working next to the new ones
    (f"IBAN {IBAN_GB}, card {VISA}, tel 13812345678",
     "IBAN [IBAN], card [BANK_CARD], tel [PHONE]"),
]

# False positives that must stay: ordinary words, years, prices, versions, times, code.
FALSE_POSITIVES = [
    "wrong DE88 3704 0044 0532 0130 00",       # IBAN shape, failing mod-97
    "ISBN 978-3-16-148410-0 and DE12 are not IBANs",
    "In 2024 the price rose to $1,299.99 (€1.199,00)",
    "version 1.2.3.4", "v10.0.0.1", "Version 10.4.2 released", "Python 3.11.4",
    "Ubuntu 22.04.3 LTS", "1.2.3.4.5", "999.1.1.1", "listen on 127.0.0.1 or 0.0.0.0",
    "Meet at 10:30", "12:30:45", "std::vector<int>", "a[1::2]", "00:1A:2B:3C:4D:5E",
    "ABSOLUTE", "INFORMATION", "DEUTDEFF", "GERMANY", "Taylor Swift MIDNIGHTS",
    "The SWIFT network ABSOLUTELY", "SWIFT is a language; BIC pens", "PASSPORT CONTROL",
    "passport photo 35x45 mm", "passport expires in 2030", "my passport is lost",
    "I lost my passport in 2019 at gate B12", "flight CA1234 at 10:05, seat 12A",
    "ID 123456", "ISO 8601", "COVID19", "HTTP/1.1 200 OK", "UTF-8", "HTTP 404",
    "合同于2023年签订，金额30万元", "iPhone 15 Pro 售价 7999 元",
    # national-id shapes with wrong check digits, or without the keyword a bare run needs
    "ticket 2345 6789 0123 (wrong Verhoeff)", "order 234567890124 shipped",
    "12345678A is not a DNI", "ABCDE1234F", "1 85 05 78 006 084 36", "RSSMRA85T10A562X",
    "850101-1234567", "123.456.789-00", "111.111.111-11", "130 692 545 people",
    "tracking 86095742719", "Steuer-ID: 86095742718", "マイナンバーは123456789017です",
    "BG 12 34 56 A", "room 12 34 56 C", "version 2023-05-07", "on 07/05/2023 at 10:05",
]


@pytest.mark.parametrize("text, expected", TRUE_POSITIVES)
def test_new_identifiers_true_positives(text, expected):
    assert redact(text) == expected


@pytest.mark.parametrize("text", FALSE_POSITIVES)
def test_new_identifiers_false_positives_stay(text):
    assert redact(text) == text


def test_false_positive_rate_is_measured():
    redacted = [t for t in FALSE_POSITIVES if redact(t) != t]
    missed = [t for t, expected in TRUE_POSITIVES if redact(t) != expected]
    print(f"pii table: {len(TRUE_POSITIVES)} true positives, {len(missed)} missed; "
          f"{len(FALSE_POSITIVES)} false-positive traps, {len(redacted)} redacted")
    assert redacted == [] and missed == []


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
    assume("swift" not in text.lower() and "bic" not in text.lower())
    assert redact(text) == text
    assert find_pii(text) == []


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["13812345678", CN_ID, VISA, "a@b.co", "2023-03-01", "5万元",
                                 IBAN_DE, IBAN_GB, "203.0.113.7", "2001:db8::8a2e:370:7334"]),
                max_size=8), st.sampled_from([" ", "，", "及", " and ", "\n"]))
def test_no_identifier_survives_among_others(parts, separator):
    out = redact(separator.join(parts))
    for secret in ("13812345678", CN_ID, VISA, "a@b.co", IBAN_DE, IBAN_GB, "203.0.113.7",
                   "2001:db8::8a2e:370:7334"):
        assert secret not in out
