import type { IAuthenticateGeneric, ICredentialTestRequest, ICredentialType, INodeProperties } from "n8n-workflow";

/** opsconsole's URL and an API token (docs/api-for-flows.md, Tokens and scopes), and the signing secret
 * of an `operation.due` subscription for the Opsconsole Trigger. n8n keeps all three in its credential
 * store, encrypted; a workflow names the credential, never its values. */
export class OpsconsoleApi implements ICredentialType {
  name = "opsconsoleApi";
  displayName = "Opsconsole API";
  icon = "file:opsconsole.svg" as const;
  documentationUrl = "https://github.com/opsconsole/opsconsole/blob/main/docs/claims.md#n8n";
  properties: INodeProperties[] = [
    {
      displayName: "URL",
      name: "url",
      type: "string",
      default: "",
      placeholder: "https://ops.example.com",
      required: true,
      description: "Where opsconsole serves its API (without /api/v1)",
    },
    {
      displayName: "Token",
      name: "token",
      type: "string",
      typeOptions: { password: true },
      default: "",
      required: true,
      description:
        "An API token (oc_…) from `manage.py token issue`. Claims need the claims scope; reading operations read; replay, resolve, cancel and pauses operate; approve and reject a person's token with approve.",
    },
    {
      displayName: "Notification Signing Secret",
      name: "signingSecret",
      type: "string",
      typeOptions: { password: true },
      default: "",
      description:
        "For the Opsconsole Trigger only: the whsec_… secret of the subscription that sends operation.due to this workflow. Leave empty if this credential is not used by a trigger.",
    },
  ];

  authenticate: IAuthenticateGeneric = {
    type: "generic",
    properties: { headers: { Authorization: "=Bearer {{$credentials.token}}" } },
  };

  // The credential test: any token with the claims scope may list due work.
  test: ICredentialTestRequest = {
    request: { baseURL: "={{$credentials.url.replace(/\\/+$/, '')}}", url: "/api/v1/claims/due", qs: { limit: 1 } },
  };
}
