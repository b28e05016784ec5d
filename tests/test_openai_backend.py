"""The OpenAI-compatible backend against a real local HTTP server speaking that protocol,
including an outage (retried, then reported per question) and a resume that finishes the work."""
import json

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from agent.backends import OpenAIBackend, Sampling, to_openai_messages
from agent.run import main as run_main
from datastore.serve import app_in_thread
from tests.test_agent import store  # noqa: F401  (fixture)


def fake_endpoint(state: dict) -> FastAPI:
    """Search once with a native tool call, then answer; return 503 while state['down']."""
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        state["requests"] += 1
        if state["down"]:
            return JSONResponse({"error": "overloaded"}, status_code=503)
        body = await request.json()
        state["bodies"].append(body)
        if not any(m["role"] == "tool" for m in body["messages"]):
            question = body["messages"][-1]["content"]
            message = {"role": "assistant", "content": "I need to search.", "tool_calls": [{
                "id": "c1", "type": "function",
                "function": {"name": "search", "arguments": json.dumps({"query": question})}}]}
        else:
            message = {"role": "assistant", "content": "<answer>Kestrel</answer>"}
        return {"choices": [{"message": message}], "usage": {"prompt_tokens": 50, "completion_tokens": 9}}

    return app


def test_openai_backend_outage_and_resume(store, tmp_path):  # noqa: F811
    state = {"down": True, "requests": 0, "bodies": []}
    questions = tmp_path / "q.jsonl"
    questions.write_text("".join(json.dumps({"id": f"q{i}", "question": "Ada Voss birthplace", "answers": ["Kestrel"]}) + "\n"
                                 for i in range(3)))
    out = tmp_path / "out"
    with app_in_thread(fake_endpoint(state)) as url:
        args = ["--backend", "openai", "--base-url", f"{url}/v1", "--model", "teacher", "--questions", str(questions),
                "--datastore", "agent", "--out", str(out), "--quiet"]
        run_main(args)
        records = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
        assert [r["finish"] for r in records] == ["error"] * 3
        assert "503" in records[0]["error"]
        assert state["requests"] == 3 * 5  # each question: 1 try + 4 retries
        state["down"] = False
        run_main(args)
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["overall"]["em"] == 1.0 and metrics["run"]["n_run_now"] == 3
    second = next(body for body in state["bodies"] if body["messages"][-1]["role"] == "tool")
    assert second["messages"][-1]["role"] == "tool" and second["messages"][-1]["tool_call_id"]
    assert "Ada Voss" in second["messages"][-1]["content"]  # the real search result went back
    assert second["tools"][0]["function"]["name"] == "search"


def test_malformed_endpoint_output_is_reported(tmp_path):
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat():
        return {"choices": []}  # malformed: no message

    with app_in_thread(app) as url:
        backend = OpenAIBackend(f"{url}/v1", "m", Sampling(), retries=1, backoff=0.01)
        completion = backend.complete([[{"role": "user", "content": "hi"}]], None)[0]
    assert completion.error and "after 2 attempts" in completion.error


def test_openai_message_conversion():
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "q"},
                {"role": "assistant", "content": "x", "tool_calls": [{"type": "function", "function": {"name": "search", "arguments": {"query": "a"}}}]},
                {"role": "tool", "name": "search", "content": "hits"},
                {"role": "assistant", "content": "bad call"}, {"role": "tool", "name": "error", "content": "Error: bad JSON"}]
    wire = to_openai_messages(messages)
    assert wire[2]["tool_calls"][0]["function"]["arguments"] == '{"query": "a"}'
    assert wire[3] == {"role": "tool", "tool_call_id": wire[2]["tool_calls"][0]["id"], "content": "hits"}
    assert wire[5] == {"role": "user", "content": "Error: bad JSON"}
