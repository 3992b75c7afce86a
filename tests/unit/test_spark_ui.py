from sparkpoint.adapters.spark_ui import parse_description, streaming_queries

QUERY = "6a1b0c5e-0000-4000-8000-000000000001"
RUN = "7b2c1d6f-0000-4000-8000-000000000002"


def test_micro_batch_descriptions_give_name_id_and_latest_batch():
    jobs = [
        {"description": f"alarms\nid = {QUERY}\nrunId = {RUN}\nbatch = 41"},
        {"description": f"alarms\nid = {QUERY}\nrunId = {RUN}\nbatch = 42"},
        {"description": f"null\nid = {RUN}\nrunId = {QUERY}\nbatch = 3"},
        {"description": "collect at app.py:12"},
        {},
    ]
    assert streaming_queries(jobs) == [
        {"name": None, "id": RUN, "run_id": QUERY, "batch_id": 3},
        {"name": "alarms", "id": QUERY, "run_id": RUN, "batch_id": 42},
    ]
    assert parse_description("") is None
