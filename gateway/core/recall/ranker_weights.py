"""The learned ranking's weights (gateway/core/recall/ranking.py), per raw unit of each feature,
written by `python -m bench locomo-ranker --write` (bench/locomo/ranker.py): trained on every
conversation of locomo-dev.json, memorybank-en-dev.json, memorybank-zh-dev.json,
longmemeval-dev.json once leave-one-conversation-out had measured the ranking (bench/README.md,
"Learned ranking")."""

DEV_WEIGHTS = {
    "similarity": 1.4966285191790654,
    "dense_rank": 1.4113477741101685,
    "lexical": 2.8164360810058695,
    "lexical_rank": 0.36983262143209855,
    "next_similarity": 1.981859009860272,
    "next_lexical": 1.1280875320193275,
    "asks": -0.2868598637875342,
    "answers": 0.4678813176577336,
    "speaker_named": 0.7839690296487825,
    "place": -0.31265129064417163,
    "fused": 15.370416008511251,
    "similarity_gap": 1.2624278908286062,
    "previous_similarity": 4.173693372986163,
    "named_day": 3.8551543906441763,
    "own_words": 3.2303619128682746,
}
