"""What a judge's tokens cost, in USD.

`judge.prices` in the configuration wins when it names the model. Otherwise the price comes
from genai-prices, a price table for the hosted providers that Pydantic maintains: its data
ships inside the installed package and is never fetched. It is matched by the endpoint's base
URL (api.openai.com, Azure, OpenRouter, Anthropic...) and the model name. An endpoint the
table does not know (a local vLLM or Ollama server, a proxy) or a model it has no price for
gives None: a cost nobody knows is `null` / "unknown", never $0.
"""

from __future__ import annotations

from reflection.judge.config import Price

__all__ = ["TablePrice", "configured_cost"]


def _tokens(prompt: int, cached: int, completion: int) -> tuple[int, int, int]:
    """(uncached prompt, cached prompt, completion) tokens, each at least 0."""
    prompt = max(prompt, 0)
    cached = min(max(cached, 0), prompt)
    return prompt - cached, cached, max(completion, 0)


def configured_cost(price: Price, prompt: int, cached: int, completion: int) -> float:
    """USD under a configured price (USD per million tokens; cached tokens at `price.cached`,
    else at the prompt price)."""
    uncached, cached, completion = _tokens(prompt, cached, completion)
    cached_price = price.prompt if price.cached is None else price.cached
    return (uncached * price.prompt + cached * cached_price + completion * price.completion) / 1e6


class TablePrice:
    """genai-prices' price of one model at one endpoint. Making one imports the table (about
    0.2 s, once per process); a model it has no price for is remembered after the first cost."""

    def __init__(self, base_url: str, model: str):
        import genai_prices  # noqa: F401 - imported here: `import reflection` and static use stay light

        self.base_url = base_url
        self.model = model
        self.missing = False

    def cost(self, prompt: int, cached: int, completion: int) -> float | None:
        """USD at the price in force now; None when the table has no price for this endpoint and model."""
        if self.missing:
            return None
        from genai_prices import Usage, calc_price

        uncached, cached, completion = _tokens(prompt, cached, completion)
        usage = Usage(input_tokens=uncached + cached, cache_read_tokens=cached, output_tokens=completion)
        try:
            found = calc_price(usage, self.model, provider_api_url=self.base_url)
        except LookupError:  # genai-prices' answer for an unknown provider or model
            self.missing = True
            return None
        return float(found.total_price)
