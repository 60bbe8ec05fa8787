import type { INodeProperties } from "n8n-workflow";

/** Shown only for these resources and operations. */
function only(resource: string, operations: string[]): INodeProperties["displayOptions"] {
  return { show: { resource: [resource], operation: operations } };
}

const resource: INodeProperties = {
  displayName: "Resource",
  name: "resource",
  type: "options",
  noDataExpression: true,
  options: [
    { name: "Claim", value: "claim", description: "Perform an action yourself: claim, then report what the vendor answered" },
    { name: "Due Work", value: "due", description: "Operations of your actions that may be claimed now" },
    { name: "Event", value: "event", description: "Hand work over to opsconsole's workers" },
    { name: "Operation", value: "operation", description: "Read and decide operations (docs/api-for-flows.md)" },
    { name: "Pause", value: "pause", description: "Hold an action's or a destination's work, and resume it" },
  ],
  default: "claim",
};

const operations: INodeProperties[] = [
  {
    displayName: "Operation",
    name: "operation",
    type: "options",
    noDataExpression: true,
    displayOptions: { show: { resource: ["claim"] } },
    options: [
      {
        name: "Claim",
        value: "claim",
        action: "Claim an action before performing it",
        description:
          "Outputs: Act (the claim is yours: call the vendor with idempotencyKey, then Report), Done (performed before: use result), Wait (claim again after retryAfter seconds), Person (a person must decide: never act)",
      },
      {
        name: "Claim by Key",
        value: "claimByKey",
        action: "Claim a due operation by its key",
        description: "For due work (the trigger's or Due Work's key); Act carries the operation's data. Same outputs as Claim.",
      },
      {
        name: "Report",
        value: "report",
        action: "Report what the vendor answered",
        description:
          "After the vendor call: 2xx succeeded; 429 failed (transient, Retry-After); 408, 3xx (Follow Redirects off), 5xx, a timeout or a reset unknown; other 4xx failed (permanent: a person decides); a refused connection failed (transient)",
      },
    ],
    default: "claim",
  },
  {
    displayName: "Operation",
    name: "operation",
    type: "options",
    noDataExpression: true,
    displayOptions: { show: { resource: ["due"] } },
    options: [{ name: "List", value: "list", action: "List due operations", description: "One item per due operation, oldest first" }],
    default: "list",
  },
  {
    displayName: "Operation",
    name: "operation",
    type: "options",
    noDataExpression: true,
    displayOptions: { show: { resource: ["event"] } },
    options: [{ name: "Submit", value: "submit", action: "Submit an event" }],
    default: "submit",
  },
  {
    displayName: "Operation",
    name: "operation",
    type: "options",
    noDataExpression: true,
    displayOptions: { show: { resource: ["operation"] } },
    options: [
      { name: "Approve", value: "approve", action: "Approve an operation", description: "A person's token with the approve scope; send the fingerprint you read" },
      { name: "Cancel", value: "cancel", action: "Cancel an operation" },
      { name: "Get", value: "get", action: "Get an operation", description: "The operation with its fingerprint and history" },
      { name: "List", value: "list", action: "List operations", description: "One item per operation" },
      { name: "Reject", value: "reject", action: "Reject an operation" },
      { name: "Replay", value: "replay", action: "Replay an operation" },
      { name: "Resolve", value: "resolve", action: "Resolve an operation with the record found" },
    ],
    default: "get",
  },
  {
    displayName: "Operation",
    name: "operation",
    type: "options",
    noDataExpression: true,
    displayOptions: { show: { resource: ["pause"] } },
    options: [
      { name: "Create", value: "create", action: "Pause work" },
      { name: "Resume", value: "resume", action: "Resume paused work" },
    ],
    default: "create",
  },
];

const claimFields: INodeProperties[] = [
  {
    displayName:
      "Act sends the vendor call with {{ $json.idempotencyKey }} and {{ $json.data }}; end it with this node's Report. Set the vendor HTTP Request's Settings › On Error to Continue (using regular output), its Response options Include Response Headers and Status and Never Error on, and its Redirects › Follow Redirects off (a followed redirect's answer is not the call's), so Report sees every answer.",
    name: "claimNotice",
    type: "notice",
    default: "",
    displayOptions: only("claim", ["claim"]),
  },
  {
    displayName: "Action",
    name: "action",
    type: "string",
    required: true,
    default: "",
    placeholder: "create-shipment",
    description: "The action's name in opsconsole (performed_by: caller)",
    displayOptions: { show: { resource: ["claim", "event"], operation: ["claim", "submit"] } },
  },
  {
    displayName: "Data",
    name: "data",
    type: "json",
    required: true,
    default: "={{ $json }}",
    description: "The event's data: the fields the action's schema names",
    displayOptions: { show: { resource: ["claim", "event"], operation: ["claim", "submit"] } },
  },
  {
    displayName: "Delivery ID",
    name: "deliveryId",
    type: "string",
    default: "",
    description: "Optional: the sender's id of this delivery, for the operation's history",
    displayOptions: { show: { resource: ["claim", "event"], operation: ["claim", "submit"] } },
  },
  {
    displayName: "Key",
    name: "key",
    type: "string",
    required: true,
    default: "={{ $json.key }}",
    placeholder: "acme:INV-7:v1:send-invoice",
    description: "The operation's key",
    displayOptions: {
      show: { resource: ["claim", "operation"], operation: ["claimByKey", "get", "approve", "reject", "replay", "resolve", "cancel"] },
    },
  },
  {
    displayName: "Lease (Seconds)",
    name: "leaseSeconds",
    type: "number",
    default: 120,
    typeOptions: { minValue: 5, maxValue: 3600 },
    description: "How long the claim is yours; the node extends it every third while the workflow runs on to Report",
    displayOptions: only("claim", ["claim", "claimByKey"]),
  },
  {
    displayName: "Keep the Claim Alive For at Most (Seconds)",
    name: "heartbeatLimitSeconds",
    type: "number",
    default: 600,
    typeOptions: { minValue: 0, maxValue: 86400 },
    description:
      "Heartbeats stop at the report, or after this long if the workflow never reaches it (the lease then expires: unknown, for a lookup or a person). 0: no heartbeat.",
    displayOptions: only("claim", ["claim", "claimByKey"]),
  },
];

const reportFields: INodeProperties[] = [
  {
    displayName: "Claim",
    name: "claim",
    type: "json",
    required: true,
    default: "={{ $('Claim').item.json.claim }}",
    description: "The Act output's claim (rename 'Claim' to your claim node's name)",
    displayOptions: only("claim", ["report"]),
  },
  {
    displayName: "Vendor Status Code",
    name: "statusCode",
    type: "string",
    default: "={{ $json.statusCode }}",
    description: "The vendor's HTTP status (or an error code such as ETIMEDOUT); empty when the call ended in an error",
    displayOptions: only("claim", ["report"]),
  },
  {
    displayName: "Vendor Headers",
    name: "headers",
    type: "json",
    default: "={{ $json.headers }}",
    description: "The vendor's answer headers (Retry-After is read from them)",
    displayOptions: only("claim", ["report"]),
  },
  {
    displayName: "Vendor Error",
    name: "vendorError",
    type: "json",
    default: "={{ $json.error }}",
    description: "The error the vendor call continued with (a timeout, a reset, a refused connection)",
    displayOptions: only("claim", ["report"]),
  },
  {
    displayName: "Record ID",
    name: "externalId",
    type: "string",
    default: "={{ $json.body?.id }}",
    description: "The vendor's id of what it created, recorded with succeeded",
    displayOptions: only("claim", ["report"]),
  },
  {
    displayName: "Result",
    name: "result",
    type: "json",
    default: "{}",
    description: "Optional: a small JSON object kept as the operation's result (a later claim's Done output carries it)",
    displayOptions: only("claim", ["report"]),
  },
];

const managementFields: INodeProperties[] = [
  {
    displayName: "Action",
    name: "action",
    type: "string",
    default: "",
    description: "Only this action's operations (empty: all)",
    displayOptions: { show: { resource: ["due", "operation"], operation: ["list"] } },
  },
  {
    displayName: "State",
    name: "state",
    type: "string",
    default: "attention",
    description: "attention (what needs a person), held, any, or one state such as pending_approval or unknown",
    displayOptions: only("operation", ["list"]),
  },
  {
    displayName: "Limit",
    name: "limit",
    type: "number",
    default: 50,
    typeOptions: { minValue: 1, maxValue: 200 },
    description: "Max number of results to return",
    displayOptions: { show: { resource: ["due", "operation"], operation: ["list"] } },
  },
  {
    displayName: "Fingerprint",
    name: "fingerprint",
    type: "string",
    required: true,
    default: "",
    description: "The operation's fingerprint as you read it (Get): an approval binds to the payload you saw",
    displayOptions: only("operation", ["approve", "reject"]),
  },
  {
    displayName: "Reason",
    name: "reason",
    type: "string",
    default: "",
    description: "Why (a reject and a pause require one); the audit trail shows it",
    displayOptions: { show: { resource: ["operation", "pause"], operation: ["approve", "reject", "replay", "cancel", "create"] } },
  },
  {
    displayName: "Record ID",
    name: "externalId",
    type: "string",
    required: true,
    default: "",
    description: "The record found at the destination",
    displayOptions: only("operation", ["resolve"]),
  },
  {
    displayName: "Note",
    name: "note",
    type: "string",
    required: true,
    default: "",
    description: "Where the record was found (the audit trail shows it)",
    displayOptions: only("operation", ["resolve"]),
  },
  {
    displayName: "Scope",
    name: "scope",
    type: "options",
    options: [
      { name: "Workspace", value: "workspace" },
      { name: "Action", value: "action" },
      { name: "Destination", value: "destination" },
    ],
    default: "action",
    displayOptions: only("pause", ["create"]),
  },
  {
    displayName: "Action",
    name: "action",
    type: "string",
    default: "",
    displayOptions: { show: { resource: ["pause"], operation: ["create"], scope: ["action"] } },
  },
  {
    displayName: "Destination",
    name: "destination",
    type: "string",
    default: "",
    displayOptions: { show: { resource: ["pause"], operation: ["create"], scope: ["destination"] } },
  },
  {
    displayName: "Pause ID",
    name: "pauseId",
    type: "number",
    required: true,
    default: 0,
    displayOptions: only("pause", ["resume"]),
  },
];

export const properties: INodeProperties[] = [resource, ...operations, ...claimFields, ...reportFields, ...managementFields];
