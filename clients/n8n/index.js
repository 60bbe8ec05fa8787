// n8n loads the nodes and credentials the package.json's "n8n" field lists; nothing to export here.
module.exports = {};
