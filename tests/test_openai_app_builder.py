"""build_openai_app (servefleet/_private/llm/app_builder.py): its two forms,
a list with keywords in code and one mapping (a config file's `args`), take
the same things, the ingress deployment's options included, and a key the
mapping does not know is refused by name."""

from __future__ import annotations

from typing import Any

import pytest

from servefleet._private.configuration.options import OptionError
from servefleet.llm import EmbeddingConfig, LLMConfig, build_openai_app

OPTIONS = {"max_ongoing_requests": 64, "num_replicas": 2}


def ingress_options(app: Any) -> dict[str, Any]:
    assert app.deployment.name == "OpenAIIngress"
    return app.deployment.options_dict


def test_both_forms_give_the_ingress_its_options() -> None:
    in_code = build_openai_app([LLMConfig(model_id="kjv")], ingress_options=OPTIONS)
    mapped = build_openai_app({"llm_configs": [{"model_id": "kjv"}],
                               "ingress_options": OPTIONS})
    # Ray's builder takes them as ingress_deployment_config.
    as_ray = build_openai_app({"llm_configs": [{"model_id": "kjv"}],
                               "ingress_deployment_config": OPTIONS})
    embedding_only = build_openai_app({"embedding_configs": [{"model_id": "m"}],
                                       "ingress_options": OPTIONS})
    for app in (in_code, mapped, as_ray, embedding_only):
        assert ingress_options(app) == OPTIONS
    # Without options the ingress has none of its own (the defaults).
    assert ingress_options(build_openai_app({"llm_configs": [{"model_id": "kjv"}]})) == {}


def test_a_mapping_may_leave_to_the_keywords_what_it_does_not_give() -> None:
    app = build_openai_app({"llm_configs": [{"model_id": "kjv"}]},
                           embedding_configs=[EmbeddingConfig(model_id="m")],
                           ingress_options=OPTIONS)
    assert ingress_options(app) == OPTIONS
    assert set(app.args[2]) == {"m"}  # the embedding servers the ingress is bound to


@pytest.mark.parametrize(("args", "keywords", "refusal"), [
    ({"llm_configs": [{"model_id": "kjv"}], "ingress_option": OPTIONS}, {},
     r"unknown keys \['ingress_option'\]"),
    ({"llm_configs": [{"model_id": "kjv"}], "ingress_options": OPTIONS,
      "ingress_deployment_config": OPTIONS}, {}, "give one"),
    ({"llm_configs": [{"model_id": "kjv"}], "ingress_options": OPTIONS},
     {"ingress_options": OPTIONS}, "ingress_options given twice"),
    ({"llm_configs": [{"model_id": "kjv"}], "ingress_options": [64]}, {},
     "ingress_options: the ingress deployment's options as a mapping"),
    ({"llm_configs": [{"model_id": "kjv"}], "ingress_options": {"name": "Mine"}}, {},
     "name is not an option here"),
    ({"llm_configs": [{"model_id": "kjv"}], "ingress_options": {"max_ongoing": 3}}, {},
     r"OpenAIIngress\.max_ongoing: unknown key"),
])
def test_what_the_builder_cannot_take_is_refused_naming_it(
        args: dict[str, Any], keywords: dict[str, Any], refusal: str) -> None:
    with pytest.raises(OptionError, match=refusal):
        build_openai_app(args, **keywords)
