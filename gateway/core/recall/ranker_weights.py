"""The learned ranking's weights (gateway/core/recall/ranking.py), per raw unit of each feature,
written by `python -m bench locomo-ranker --write` (bench/locomo/ranker.py): trained on every
conversation of locomo-dev.json, memorybank-en-dev.json, memorybank-zh-dev.json once leave-one-
conversation-out had measured the ranking (bench/README.md, "Learned ranking")."""

DEV_WEIGHTS = {
    "similarity": 1.726366350764106,
    "dense_rank": 1.552343743242538,
    "lexical": 3.0205872556745113,
    "lexical_rank": -0.07534672192320419,
    "next_similarity": 2.8954885497262217,
    "next_lexical": 0.9774678453927449,
    "asks": -0.4017630514882382,
    "answers": 0.526697409848395,
    "speaker_named": 0.7907500554317023,
    "length": 0.5621779513986311,
    "place": -0.5991709483486,
    "fused": 12.21302602741354,
    "similarity_gap": 1.426824768283296,
    "previous_similarity": 5.037409493645728,
    "named_day": 4.862972791348026,
}
