"""The refund agent the framework-hook tests share: its tools as plain functions (each test
wraps them with its framework's decorator), its instructions, and a judge reply that fails
the hallucination check."""

from __future__ import annotations

from collections.abc import Callable

from reflection.testing import check_reply

INSTRUCTIONS = "You handle refunds. Today is 2026-03-10."
QUESTION = "Order ORD-1042 arrived broken, please refund the 49.90 I paid."
FAIL_HALLUCINATION = {
    name: check_reply(5)
    for name in (
        "general_value_format_alignment",
        "function_selection_appropriateness",
        "agentic_constraints_satisfaction",
    )
}
FAIL_HALLUCINATION["general_hallucination_check"] = check_reply(
    1, explanation="order ORD-999 appears nowhere; the user gave ORD-1042", evidence=["Order ORD-1042"]
)


def refund_tools(refunds: list[dict]) -> list[Callable[..., str]]:
    """`refund_order` (appends what it refunded to `refunds`) and `get_order`."""

    def refund_order(order_id: str, amount: float) -> str:
        """Refund an order.

        Args:
            order_id: Order id, e.g. ORD-1042.
            amount: Amount in the order's currency.
        """
        refunds.append({"order_id": order_id, "amount": amount})
        return f"refunded {amount} on {order_id}"

    def get_order(order_id: str) -> str:
        """Look up an order by id."""
        return "{}"

    return [refund_order, get_order]
