"""The learned ranking's weights (gateway/core/recall/ranking.py), per raw unit of each feature,
written by `python -m bench locomo-ranker --write` (bench/locomo/ranker.py): trained on
every conversation of locomo-dev.json once leave-one-conversation-out had measured the
ranking (bench/README.md, "Learned ranking")."""

DEV_WEIGHTS = {
    "similarity": 2.125519656733187,
    "dense_rank": 1.636361940415356,
    "lexical": 2.652623236386024,
    "lexical_rank": 0.21263409338231043,
    "next_similarity": 0.2333420846548225,
    "next_lexical": 1.504903202807575,
    "asks": -0.5701189879173432,
    "answers": 0.6822350116638496,
    "speaker_named": 1.0789301084110443,
    "length": 1.2586641793083302,
    "place": -0.4216894661645305,
    "fused": 16.30636994554635,
    "similarity_gap": 2.044310165116856,
    "previous_similarity": 7.756201677934249,
}
