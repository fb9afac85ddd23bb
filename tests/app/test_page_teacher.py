"""Teacher view (AppTest): closed without KVLAB_TEACHER_KEY; with it, the key opens a class's completion and
predictions (wrong keys wait longer and longer, server-wide), and a learner's passphrase can be reset."""

import pytest

from lessons import predictions
from progress import auth, open_store
from progress.auth import SignInError
from ui.course import LESSON_IDS

KEY = "s3cret teacher key"


@pytest.fixture(autouse=True)
def server(tmp_path, monkeypatch):
    """A server with its SQLite file in tmp_path and a teacher key (tests that need none unset it)."""
    monkeypatch.setenv("KVLAB_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("KVLAB_DATABASE_URL", raising=False)
    monkeypatch.setenv("KVLAB_TEACHER_KEY", KEY)
    monkeypatch.setattr(auth, "ARGON2_MEMORY_KIB", 8)  # quick sign-ins for the fixtures' learners


def _open(app_test, key: str = KEY):
    at = app_test("teacher", timeout=60).run()
    at.text_input(key="teacher_key").input(key)
    return at.button(key="FormSubmitter:teacher_unlock-Open the teacher view").click().run()


def test_without_a_teacher_key_the_view_is_closed(monkeypatch, app_test):
    s = open_store()
    s.save("Room 7", "Ana", {"visited": list(LESSON_IDS)})
    s.close()
    for unset in ("", "   "):
        monkeypatch.setenv("KVLAB_TEACHER_KEY", unset)
        at = app_test("teacher", timeout=60).run()
        assert not at.exception and not at.error
        (note,) = at.info
        assert "this server has no teacher key" in note.value and "KVLAB_TEACHER_KEY" in note.value
        assert "docs/SECURITY.md" in note.value
        assert not at.text_input and not at.dataframe and not at.button and not at.selectbox  # nothing else
    monkeypatch.delenv("KVLAB_TEACHER_KEY")
    assert not app_test("teacher", timeout=60).run().text_input


def test_teacher_page_lists_class_and_exports_csv(app_test):
    s = open_store()
    s.save("Room 7", "Ana", {"visited": list(LESSON_IDS), "quiz": {}, "diagnosis": {}})
    s.save("Room 7", "Bob", {"visited": [LESSON_IDS[0]], "quiz": {}, "diagnosis": {}})
    s.save("Room 8", "Cy", {"visited": ["gqa"], "quiz": {}, "diagnosis": {}})  # another class
    s.close()
    at = _open(app_test)
    assert not at.exception and not at.error
    at.text_input(key="teacher_class_code").input("room 7").run()
    assert not at.exception and not at.error
    # Two learners, one visited all 8 lessons and one visited 1: mean completion 100 x (8 + 1) / (2 x 8) = 56.25 %.
    assert len(LESSON_IDS) == 8
    assert [m.value for m in at.metric] == ["2", "1", "56 %"]
    assert "2 learners in class `room 7`; completion counts the 8 lesson pages." in [c.value for c in at.caption]
    table = at.dataframe[0].value
    assert list(table["learner"]) == ["Ana", "Bob"] and list(table["completion_pct"]) == [100.0, round(100 / 8, 1)]
    assert list(table["predictions"]) == [0, 0]
    assert "No learner in this class has checked a prediction yet." in [c.value for c in at.caption]
    at.text_input(key="teacher_class_code").input("room'; --").run()
    assert "class code may use" in at.error[0].value and not at.exception


def test_teacher_key_guards_the_list_and_wrong_keys_wait(app_test):
    s = open_store()
    s.save("Room 7", "Ana", {"visited": ["gqa"]})
    s.close()
    at = app_test("teacher", timeout=60).run()
    assert [t.key for t in at.text_input] == ["teacher_key"]  # only the key field until the key matches
    assert not at.dataframe  # nobody's predictions either
    for i in range(4):
        at.text_input(key="teacher_key").input(f"wrong {i}")
        at.button(key="FormSubmitter:teacher_unlock-Open the teacher view").click().run()
        assert "wrong teacher key" in at.error[0].value and [t.key for t in at.text_input] == ["teacher_key"]
    at.text_input(key="teacher_key").input("wrong 5")
    at.button(key="FormSubmitter:teacher_unlock-Open the teacher view").click().run()
    assert "wait 2 s before the next try" in at.error[0].value
    at.text_input(key="teacher_key").input(KEY)
    at.button(key="FormSubmitter:teacher_unlock-Open the teacher view").click().run()
    assert "too many wrong tries" in at.error[0].value and [t.key for t in at.text_input] == ["teacher_key"]
    # Another session (the teacher's own tab) with the right key opens at once: the guesser's wrong keys slow
    # the guesser's session (and address, after many more), never every teacher of the server.
    tab = _open(app_test)
    assert not tab.error and not tab.exception and [t.key for t in tab.text_input] == ["teacher_class_code"]


def test_the_right_key_opens_the_view_for_this_session(app_test):
    at = _open(app_test)
    assert not at.error and [t.key for t in at.text_input] == ["teacher_class_code"]
    at.run()  # later runs do not ask again
    assert [t.key for t in at.text_input] == ["teacher_class_code"]


def test_the_key_may_come_from_a_file(monkeypatch, tmp_path, app_test):
    """KVLAB_TEACHER_KEY_FILE (a Docker or Kubernetes secret): the file's stripped content is the key."""
    monkeypatch.delenv("KVLAB_TEACHER_KEY")
    secret = tmp_path / "teacher_key"
    secret.write_text(f"{KEY}\n")
    monkeypatch.setenv("KVLAB_TEACHER_KEY_FILE", str(secret))
    at = _open(app_test)
    assert not at.error and [t.key for t in at.text_input] == ["teacher_class_code"]
    secret.unlink()  # gone since the server's start: the page says so instead of opening or failing
    at = app_test("teacher", timeout=60).run()
    assert not at.exception and "KVLAB_TEACHER_KEY_FILE" in at.error[0].value and not at.text_input


def test_teacher_resets_a_learners_passphrase(app_test):
    s = open_store()
    s.sign_in("Room 7", "Ana", "ana's passphrase")
    s.save("Room 7", "Ana", {"visited": ["gqa"]})
    s.save("Room 7", "Bob", {"visited": ["gqa"]})  # a record from before passphrases
    at = _open(app_test)
    at.text_input(key="teacher_class_code").input("Room 7").run()
    picker = at.selectbox(key="teacher_reset_learner")
    assert picker.options == ["Ana", "Bob (no passphrase)"]
    assert at.button(key="teacher_reset").disabled  # nobody picked yet
    picker.set_value("ana").run()
    at.button(key="teacher_reset").click().run()
    assert "Reset the passphrase of `Ana` in class `Room 7`?" in at.warning[0].value
    s.sign_in("Room 7", "Ana", "ana's passphrase")  # not reset before the confirmation
    at.button(key="teacher_reset_confirm").click().run()
    assert not at.exception and not at.error
    assert "reset: their next sign-in sets a new one" in at.success[0].value
    assert s.sign_in("room 7", "ana", "a new passphrase").status == "set"
    with pytest.raises(SignInError, match="wrong passphrase"):
        s.sign_in("room 7", "ana", "ana's passphrase")  # the old one no longer opens the name
    assert s.load("Room 7", "Ana")["visited"] == ["gqa"]
    s.close()


def test_teacher_sees_each_learners_predictions(app_test):
    gqa, paged = predictions.check("gqa", 512), predictions.check("paged", 63)  # what the lesson pages save
    s = open_store()
    s.save("Room 7", "Ana", {"visited": ["gqa", "paged"], "predict": {"gqa": gqa.record(), "paged": paged.record()}})
    s.save("Room 7", "Bob", {"visited": ["gqa"]})
    s.close()
    at = _open(app_test)
    at.text_input(key="teacher_class_code").input("Room 7").run()
    assert not at.exception and not at.error
    summary = at.dataframe[0].value
    assert list(summary["predictions"]) == [2, 0] and list(summary["predictions_close"]) == [1, 0]
    detail = at.dataframe[1].value  # the predictions table, under the summary
    assert detail.to_dict("records") == [
        {"learner": "Ana", "page": "gqa", "prediction": 512.0, "answer": 68.625, "off_by_pct": 646.1, "close": False},
        {"learner": "Ana", "page": "paged", "prediction": 63.0, "answer": 63.0, "off_by_pct": 0.0, "close": True},
    ]
