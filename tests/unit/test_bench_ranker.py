"""Training the learned ranking (bench/locomo/ranker.py): who is left out of a fold, how the
data sets weigh, and that Newton's method finds what gradient descent would."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from bench.locomo.ranker import (balanced, dev_sets, leave_one_out, leave_one_set_out, person,
                                 train)
from gateway.core.recall.ranking import FEATURES


def group(sign: float, n: int = 6) -> tuple[np.ndarray, np.ndarray]:
    """One question: its evidence scores `sign` on the first feature, the others the opposite."""
    x = np.zeros((n, len(FEATURES)))
    x[:, 0] = -sign
    x[0, 0] = sign
    x[:, 1] = np.arange(n)  # a feature that says nothing
    return x, np.array([1.0] + [0.0] * (n - 1))


def corpus(sample_id: str) -> SimpleNamespace:
    return SimpleNamespace(conversation=SimpleNamespace(sample_id=sample_id))


def test_a_person_is_one_user_in_every_language():
    assert person("mb-zh-07") == person("mb-en-07") == "mb-07"
    assert person("mb-zh-07") != person("mb-zh-08")
    assert person("conv-26") == "conv-26"


def test_a_fold_leaves_out_the_conversation_and_its_translation():
    # Only the held-out user's own chats say the first feature is good: its fold must not
    # learn that from its translation.
    data = {"mb-zh-01": [group(1.0)], "mb-en-01": [group(1.0)], "mb-zh-02": [group(-1.0)]}
    rankers = leave_one_out([corpus("mb-zh-01")], data)
    assert rankers["mb-zh-01"].weights[0] < 0
    assert leave_one_out([corpus("solo")], {"solo": [group(1.0)]}) == {}


def test_every_set_weighs_the_same_however_many_questions_it_has():
    # 30 questions of one set say the first feature is good, 3 of each of two other sets say
    # it is bad: by question the 30 win, by set the two.
    data = {"a": [group(1.0)] * 30, "b": [group(-1.0)] * 3, "c": [group(-1.0)] * 3}
    sets = {"a": "big.json", "b": "small.json", "c": "other.json"}
    weights = balanced(list(data), data, sets)
    assert [sum(weights[:30]), sum(weights[30:33]), sum(weights[33:])] == pytest.approx([1.0] * 3)
    by_question = train([g for gs in data.values() for g in gs])
    by_set = train([g for gs in data.values() for g in gs], weights=weights)
    assert by_question.weights[0] > 0 > by_set.weights[0]  # 30 to 6, then 1 to 2


def test_a_set_held_out_is_ranked_by_weights_that_never_saw_it():
    # Only set a says the first feature is good: its ranker learns the others' opposite; the
    # others' rankers see a beside the remaining set, weighing the same.
    data = {"a1": [group(1.0)] * 5, "b1": [group(-1.0)], "c1": [group(-1.0)], "c2": []}
    sets = {"a1": "a.json", "b1": "b.json", "c1": "c.json", "c2": "c.json"}
    rankers = leave_one_set_out(data, sets)
    assert set(rankers) == {"a.json", "b.json", "c.json"}
    assert rankers["a.json"].weights[0] < 0
    assert leave_one_set_out({"x": [group(1.0)]}, {"x": "only.json"}) == {}


def test_newton_reaches_the_minimum_gradient_descent_approaches():
    rng = np.random.default_rng(0)
    groups = []
    for _ in range(20):
        x = rng.normal(size=(8, len(FEATURES)))
        y = np.zeros(8)
        y[int(np.argmax(x[:, 2] + 0.5 * x[:, 3]))] = 1.0
        groups.append((x, y))
    fast = np.array(train(groups).weights)
    slow = np.array(train(groups, iterations=1).weights)  # one step: not there yet
    assert fast[2] > fast[3] > 0 and not np.allclose(fast, slow)


def test_held_out_weights_train_on_the_dev_sets_beside_the_data(tmp_path):
    for name in ("locomo-dev.json", "memorybank-zh-dev.json", "other.json"):
        (tmp_path / name).write_text("[]")
    assert dev_sets(tmp_path / "other.json") == [
        tmp_path / "other.json", tmp_path / "locomo-dev.json", tmp_path / "memorybank-zh-dev.json"]
    assert dev_sets(tmp_path / "locomo-dev.json") == [
        tmp_path / "locomo-dev.json", tmp_path / "memorybank-zh-dev.json"]
