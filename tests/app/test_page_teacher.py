"""Teacher view (AppTest): a class code lists its learners' completion and predictions; a teacher key guards it."""

from lessons import predictions
from progress import open_store
from ui.course import LESSON_IDS


def test_teacher_page_lists_class_and_exports_csv(tmp_path, monkeypatch, app_test):
    monkeypatch.setenv("KVLAB_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("KVLAB_TEACHER_KEY", raising=False)
    s = open_store()
    s.save("Room 7", "Ana", {"visited": list(LESSON_IDS), "quiz": {}, "diagnosis": {}})
    s.save("Room 7", "Bob", {"visited": [LESSON_IDS[0]], "quiz": {}, "diagnosis": {}})
    s.save("Room 8", "Cy", {"visited": ["gqa"], "quiz": {}, "diagnosis": {}})  # another class
    s.close()
    at = app_test("teacher", timeout=60).run()
    assert not at.exception and not at.error
    at.text_input(key="teacher_class_code").input("room 7").run()
    assert not at.exception and not at.error
    assert [m.value for m in at.metric][:2] == ["2", "1"]
    table = at.dataframe[0].value
    assert list(table["learner"]) == ["Ana", "Bob"] and list(table["completion_pct"]) == [100.0, round(100 / 7, 1)]
    assert list(table["predictions"]) == [0, 0]
    assert "No learner in this class has checked a prediction yet." in [c.value for c in at.caption]
    at.text_input(key="teacher_class_code").input("room'; --").run()
    assert "class code may use" in at.error[0].value and not at.exception


def test_teacher_key_guards_the_list(tmp_path, monkeypatch, app_test):
    monkeypatch.setenv("KVLAB_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("KVLAB_TEACHER_KEY", "s3cret")
    at = app_test("teacher", timeout=60).run()
    assert len(at.text_input) == 1  # only the key field until the key matches
    assert not at.dataframe  # nobody's predictions either
    at.text_input(key="teacher_key").input("wrong").run()
    assert len(at.text_input) == 1
    at.text_input(key="teacher_key").input("s3cret").run()
    assert len(at.text_input) == 2 and not at.exception


def test_teacher_sees_each_learners_predictions(tmp_path, monkeypatch, app_test):
    monkeypatch.setenv("KVLAB_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("KVLAB_TEACHER_KEY", raising=False)
    gqa, paged = predictions.check("gqa", 512), predictions.check("paged", 63)  # what the lesson pages save
    s = open_store()
    s.save("Room 7", "Ana", {"visited": ["gqa", "paged"], "predict": {"gqa": gqa.record(), "paged": paged.record()}})
    s.save("Room 7", "Bob", {"visited": ["gqa"]})
    s.close()
    at = app_test("teacher", timeout=60).run()
    at.text_input(key="teacher_class_code").input("Room 7").run()
    assert not at.exception and not at.error
    summary = at.dataframe[0].value
    assert list(summary["predictions"]) == [2, 0] and list(summary["predictions_close"]) == [1, 0]
    detail = at.dataframe[1].value  # the predictions table, under the summary
    assert detail.to_dict("records") == [
        {"learner": "Ana", "page": "gqa", "prediction": 512.0, "answer": 128.0, "off_by_pct": 300.0, "close": False},
        {"learner": "Ana", "page": "paged", "prediction": 63.0, "answer": 63.0, "off_by_pct": 0.0, "close": True},
    ]
