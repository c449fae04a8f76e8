"""The learned ranking's weights (gateway/core/recall/ranking.py), per raw unit of each feature,
written by `python -m bench locomo-ranker --write` (bench/locomo/ranker.py): trained on every
conversation of locomo-dev.json, memorybank-en-dev.json, memorybank-zh-dev.json once leave-one-
conversation-out had measured the ranking (bench/README.md, "Learned ranking")."""

DEV_WEIGHTS = {
    "similarity": 2.0663885768430985,
    "dense_rank": 1.4717256564629655,
    "lexical": 2.5641841711129025,
    "lexical_rank": 0.16474951923180028,
    "next_similarity": 2.897592564420433,
    "next_lexical": 0.8779646402413114,
    "asks": -0.4927958916955435,
    "answers": 0.542799373748546,
    "speaker_named": 0.7654657605716843,
    "length": 0.8672820178608583,
    "place": -0.6171430850595461,
    "fused": 13.88318756397025,
    "similarity_gap": 1.7078497857841204,
    "previous_similarity": 4.972933457093233,
    "named_day": 4.783203892578922,
    "own_words": 1.5729316181333526,
}
