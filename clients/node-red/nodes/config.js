"use strict";
// The connection to one opsconsole: its URL in the flow, its API token (and the signing secret of
// its notifications) only in Node-RED's credential store, never in the flow file.
const { Opsconsole } = require("opsconsole-client");

module.exports = function (RED) {
  function OpsconsoleConfig(config) {
    RED.nodes.createNode(this, config);
    this.name = config.name;
    this.url = (config.url || "").trim();
    this.timeoutMs = Number(config.timeoutMs) || 10000;
    let client;

    /** The client for this connection, made once; throws a clear error when it cannot be. */
    this.client = () => {
      if (client) return client;
      if (!/^https?:\/\//.test(this.url)) {
        throw new Error(`opsconsole-config "${this.name || this.id}": the URL must start with http:// or https://`);
      }
      if (/^https?:\/\/[^/?#]*@/i.test(this.url)) {
        // fetch would refuse it with a message repeating the URL, password and all.
        throw new Error(
          `opsconsole-config "${this.name || this.id}": the URL must not carry a user or a password (the API token is the credential)`,
        );
      }
      const token = this.credentials && this.credentials.token;
      if (!token) {
        throw new Error(`opsconsole-config "${this.name || this.id}": no API token (set it in the connection's credentials)`);
      }
      client = new Opsconsole({ baseUrl: this.url, token, timeoutMs: this.timeoutMs });
      return client;
    };

    this.signingSecret = () => (this.credentials && this.credentials.signingSecret) || "";
  }

  RED.nodes.registerType("opsconsole-config", OpsconsoleConfig, {
    credentials: {
      token: { type: "password" },
      signingSecret: { type: "password" },
    },
  });
};
