"""The learned ranking's weights (gateway/core/recall/ranking.py), per raw unit of each feature,
written by `python -m bench locomo-ranker --write` (bench/locomo/ranker.py): trained on every
conversation of locomo-dev.json, memorybank-en-dev.json, memorybank-zh-dev.json,
longmemeval-dev.json once leave-one-conversation-out had measured the ranking (bench/README.md,
"Learned ranking")."""

DEV_WEIGHTS = {
    "similarity": 2.0065846673914742,
    "dense_rank": 1.2630209833383175,
    "lexical": 2.77370151585851,
    "lexical_rank": 0.5073910014572045,
    "next_similarity": 2.563247168077679,
    "next_lexical": 0.9674601456851496,
    "asks": -0.3695034928248602,
    "answers": 0.44535437045349585,
    "speaker_named": 0.7846889275083807,
    "place": -0.2484612211546064,
    "fused": 15.535262561072672,
    "similarity_gap": 1.6927446568622186,
    "previous_similarity": 4.7648979420209425,
    "named_day": 4.212674876272424,
    "own_words": 1.7650200986568634,
}
