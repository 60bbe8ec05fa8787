import type {
  IDataObject,
  INodeType,
  INodeTypeDescription,
  IWebhookFunctions,
  IWebhookResponseData,
} from "n8n-workflow";

import { verifySignature } from "./signature";

const SEEN_LIMIT = 200;

/**
 * Receives opsconsole's signed notifications (docs/integrations.md, Notifications), checks the
 * Standard Webhooks signature with the credential's signing secret, drops repeats of a webhook-id it
 * has started a run for, and starts the workflow with the operation's key: claim it by key next.
 */
export class OpsconsoleTrigger implements INodeType {
  description: INodeTypeDescription = {
    displayName: "Opsconsole Trigger",
    name: "opsconsoleTrigger",
    icon: "file:opsconsole.svg",
    group: ["trigger"],
    version: 1,
    subtitle: '={{$parameter["events"].join(", ")}}',
    description:
      "Starts the workflow when opsconsole notifies that an operation may be claimed (operation.due) or needs a person. Checks the signature.",
    defaults: { name: "Opsconsole Trigger" },
    inputs: [],
    outputs: ["main"],
    credentials: [{ name: "opsconsoleApi", required: true }],
    webhooks: [{ name: "default", httpMethod: "POST", responseMode: "onReceived", path: "opsconsole" }],
    properties: [
      {
        displayName:
          "Subscribe this webhook's Production URL to the events in opsconsole (docs/integrations.md, Notifications), with the signing secret saved in the credential. Then claim the operation by its key: Opsconsole › Claim › Claim by Key with {{ $json.key }}.",
        name: "notice",
        type: "notice",
        default: "",
      },
      {
        displayName: "Events",
        name: "events",
        type: "multiOptions",
        options: [
          { name: "Operation Due (May Be Claimed Now)", value: "operation.due" },
          { name: "Operation Awaiting Approval", value: "operation.awaiting_approval" },
          { name: "Operation Needs Review", value: "operation.needs_review" },
        ],
        default: ["operation.due"],
        description: "Which notifications start the workflow; others are acknowledged and ignored",
      },
      {
        displayName: "Action",
        name: "action",
        type: "string",
        default: "",
        placeholder: "create-shipment",
        description:
          "Only this action's notifications start the workflow (a subscription sends those of every action of the workspace: a workflow that performs one action must not claim another's work). Empty: every action's.",
      },
    ],
  };

  async webhook(this: IWebhookFunctions): Promise<IWebhookResponseData> {
    const request = this.getRequestObject();
    const response = this.getResponseObject();
    const credentials = await this.getCredentials("opsconsoleApi");
    const secret = String(credentials.signingSecret ?? "");
    if (!secret) {
      response.status(500).json({ status: "refused", detail: "the credential has no notification signing secret" });
      return { noWebhookResponse: true };
    }
    const raw = (request as unknown as { rawBody?: Buffer }).rawBody ?? JSON.stringify(request.body ?? {});
    const verdict = verifySignature(secret, request.headers, raw);
    if (!verdict.valid) {
      response.status(401).json({ status: "refused", detail: `signature not accepted: ${verdict.reason}` });
      return { noWebhookResponse: true };
    }
    const body = this.getBodyData() as IDataObject;
    const type = String(body.type ?? "");
    const events = this.getNodeParameter("events", []) as string[];
    const action = String(this.getNodeParameter("action", "") ?? "").trim();
    const data = (body.data && typeof body.data === "object" ? body.data : {}) as IDataObject;
    const webhookId = String(request.headers["webhook-id"]);
    if (!events.includes(type) || (action && data.action !== action) || alreadySeen(this, webhookId)) {
      return { webhookResponse: { status: "ignored" } };
    }
    return {
      workflowData: [
        this.helpers.returnJsonArray([
          { ...data, type, webhookId, timestamp: body.timestamp ?? null, key: data.key ?? null },
        ]),
      ],
    };
  }
}

/** A sender retries a notification it got no answer to: the same webhook-id starts one run. */
function alreadySeen(context: IWebhookFunctions, webhookId: string): boolean {
  const memory = context.getWorkflowStaticData("node") as { seen?: string[] };
  const seen = memory.seen ?? [];
  if (seen.includes(webhookId)) return true;
  memory.seen = [...seen, webhookId].slice(-SEEN_LIMIT);
  return false;
}

