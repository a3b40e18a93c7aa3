"""vLLM 0.32's error bodies and the request validation that produces them: pure functions.

Clients (the `openai` package, the operator's probes) branch on the HTTP code and on
`error.type`/`error.param`, so these follow the captured bodies in
tests/fixtures/vllm-0.32-cpu/error-*.txt to the character. Validation mimics the pydantic
messages vLLM's FastAPI layer turns into `"N validation error:\n  {...}"`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

ErrorBody = dict[str, dict[str, Any]]
Check = Callable[[object], "tuple[str, str] | None"]


def error_body(message: str, type_: str, param: str | None, code: int) -> ErrorBody:
    """The `{"error": {...}}` envelope vLLM returns with every non-2xx answer."""
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def unknown_model(requested: str, aliases: tuple[str, ...]) -> ErrorBody:
    """404 for a `model` that is none of the served names."""
    return error_body(
        f"The model `{requested}` does not exist. Valid aliases: {', '.join(aliases)}.",
        "NotFoundError",
        "model",
        404,
    )


def max_tokens_too_large(max_tokens: int, max_model_len: int) -> ErrorBody:
    """400 for max_tokens beyond the context window on its own (captured verbatim)."""
    return error_body(
        f"max_tokens={max_tokens} cannot be greater than max_model_len={max_model_len}. "
        f"Please request fewer output tokens. (parameter=max_tokens, value={max_tokens})",
        "BadRequestError",
        "max_tokens",
        400,
    )


def context_too_long(prompt_tokens: int, max_tokens: int, max_model_len: int) -> ErrorBody:
    """400 for prompt + max_tokens beyond the context window (wording not in the captures)."""
    return error_body(
        f"'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. This model's "
        f"maximum context length is {max_model_len} tokens and your request has "
        f"{prompt_tokens} input tokens ({max_tokens} > {max_model_len} - {prompt_tokens}). "
        f"(parameter=max_tokens, value={max_tokens})",
        "BadRequestError",
        "max_tokens",
        400,
    )


def unsupported(message: str, param: str) -> ErrorBody:
    """400 for requests the simulator does not imitate (say so rather than answer wrongly)."""
    return error_body(message, "BadRequestError", param, 400)


def validation_failed(errors: list[dict[str, Any]]) -> ErrorBody:
    """400 in the FastAPI-validation shape: count, then one Python repr per pydantic error."""
    count = len(errors)
    lines = "\n".join(f"  {error!r}" for error in errors)
    message = f"{count} validation error{'s' if count > 1 else ''}:\n{lines}"
    return error_body(message, "Bad Request", errors[0]["loc"], 400)


def invalid_json(reason: str) -> ErrorBody:
    """400 for a body that is not JSON, in FastAPI's json_invalid shape."""
    return validation_failed(
        [
            {
                "type": "json_invalid",
                "loc": "body",
                "msg": "JSON decode error",
                "input": {},
                "ctx": {"error": reason},
            }
        ]
    )


def _typed(expected: type, kind: str, msg: str) -> Check:
    def check(value: object) -> tuple[str, str] | None:
        # bool is an int subclass; pydantic rejects it where an int is expected only in strict mode,
        # but vLLM clients never send one on purpose, so treat it as a type error.
        ok = isinstance(value, expected) and not (expected is int and isinstance(value, bool))
        return None if ok else (kind, msg)

    return check


_STRING = _typed(str, "string_type", "Input should be a valid string")
_INT = _typed(int, "int_type", "Input should be a valid integer")
_BOOL = _typed(bool, "bool_type", "Input should be a valid boolean")
_DICT = _typed(dict, "dict_type", "Input should be a valid dictionary")
_LIST = _typed(list, "list_type", "Input should be a valid list")

_COMMON: Mapping[str, Check] = {
    "model": _STRING,
    "max_tokens": _INT,
    "n": _INT,
    "seed": _INT,
    "stream": _BOOL,
    "stream_options": _DICT,
    "ignore_eos": _BOOL,
}
_CHAT: Mapping[str, Check] = {**_COMMON, "max_completion_tokens": _INT}


def _check_fields(
    body: Mapping[str, Any], checks: Mapping[str, Check], prefix: str
) -> list[dict[str, Any]]:
    errors = []
    for field, check in checks.items():
        value = body.get(field)
        problem = None if value is None else check(value)
        if problem:
            errors.append(
                {"type": problem[0], "loc": f"{prefix}.{field}", "msg": problem[1], "input": value}
            )
    return errors


def _not_an_object(body: object) -> list[dict[str, Any]]:
    return [
        {
            "type": "model_attributes_type",
            "loc": "body",
            "msg": "Input should be a valid dictionary or object to extract fields from",
            "input": body,
        }
    ]


def _missing(body: Mapping[str, Any], field: str) -> dict[str, Any]:
    return {"type": "missing", "loc": f"body.{field}", "msg": "Field required", "input": body}


def validate_chat(body: object) -> list[dict[str, Any]]:
    """Pydantic-style errors for a /v1/chat/completions body; empty when it is acceptable."""
    if not isinstance(body, dict):
        return _not_an_object(body)
    errors = _check_fields(body, _CHAT, "body")
    messages = body.get("messages")
    if messages is None:
        return [_missing(body, "messages"), *errors]
    problem = _LIST(messages)
    if problem:
        return [
            {"type": problem[0], "loc": "body.messages", "msg": problem[1], "input": messages},
            *errors,
        ]
    for index, message in enumerate(messages):
        where = f"body.messages.{index}"
        if not isinstance(message, dict):
            errors.append(
                {
                    "type": "dict_type",
                    "loc": where,
                    "msg": "Input should be a valid dictionary",
                    "input": message,
                }
            )
        elif "role" not in message:
            errors.append(
                {
                    "type": "missing",
                    "loc": f"{where}.role",
                    "msg": "Field required",
                    "input": message,
                }
            )
        elif not isinstance(message["role"], str):
            errors.append(
                {
                    "type": "string_type",
                    "loc": f"{where}.role",
                    "msg": "Input should be a valid string",
                    "input": message["role"],
                }
            )
    return errors


def validate_completion(body: object) -> list[dict[str, Any]]:
    """Pydantic-style errors for a /v1/completions body; empty when it is acceptable."""
    if not isinstance(body, dict):
        return _not_an_object(body)
    errors = _check_fields(body, _COMMON, "body")
    prompt = body.get("prompt")
    if prompt is None:
        return [_missing(body, "prompt"), *errors]
    if not isinstance(prompt, (str, list)):
        errors.append(
            {
                "type": "string_type",
                "loc": "body.prompt",
                "msg": "Input should be a valid string",
                "input": prompt,
            }
        )
    return errors
