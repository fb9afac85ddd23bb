"""Teacher view (AppTest): a class code lists its learners' completion; a server's teacher key guards the list."""

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
    at.text_input(key="teacher_class_code").input("room'; --").run()
    assert "class code may use" in at.error[0].value and not at.exception


def test_teacher_key_guards_the_list(tmp_path, monkeypatch, app_test):
    monkeypatch.setenv("KVLAB_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("KVLAB_TEACHER_KEY", "s3cret")
    at = app_test("teacher", timeout=60).run()
    assert len(at.text_input) == 1  # only the key field until the key matches
    at.text_input(key="teacher_key").input("wrong").run()
    assert len(at.text_input) == 1
    at.text_input(key="teacher_key").input("s3cret").run()
    assert len(at.text_input) == 2 and not at.exception
