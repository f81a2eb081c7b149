"""The Order saga, hand-written on the saga engine, and the same saga as declarative steps."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field
from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from sagacity.workflow import Saga, SagaOptions, SagaResult, SagaSpec, Step
    from workflows.order.tools import create_order, reserve_inventory, send_confirmation


class OrderRequest(BaseModel):
    product_id: str = "p-1"
    quantity: int = 2
    options: SagaOptions = Field(default_factory=SagaOptions)


@workflow.defn(name="order.PlaceOrder")
class PlaceOrder:
    """Reserve stock, create the order, send the confirmation (after a human approves it)."""

    @workflow.init
    def __init__(self, request: OrderRequest) -> None:
        # the saga's signals and updates exist from the first workflow task
        self.saga = Saga(request.options)

    @workflow.run
    async def run(self, request: OrderRequest) -> SagaResult:
        saga = self.saga

        async def place() -> dict[str, Any]:
            reservation = await saga.call(
                reserve_inventory, product_id=request.product_id, quantity=request.quantity
            )
            order = await saga.call(
                create_order,
                product_id=request.product_id,
                quantity=request.quantity,
                reservation_id=reservation["reservation_id"],
            )
            confirmation = await saga.call(send_confirmation, order_id=order["order_id"])
            return {"order_id": order["order_id"], "message_id": confirmation["message_id"]}

        return await saga.run(place)


def order_steps(
    product_id: str = "p-1", quantity: int = 2, options: SagaOptions | None = None
) -> SagaSpec:
    """The Order saga for the generic steps workflow, ``sagacity.Steps``."""
    return SagaSpec(
        steps=[
            Step(tool="reserve_inventory", args={"product_id": product_id, "quantity": quantity}),
            Step(
                tool="create_order",
                args={
                    "product_id": product_id,
                    "quantity": quantity,
                    "reservation_id": {"$ref": "reserve_inventory.reservation_id"},
                },
            ),
            Step(tool="send_confirmation", args={"order_id": {"$ref": "create_order.order_id"}}),
        ],
        options=options or SagaOptions(),
    )
