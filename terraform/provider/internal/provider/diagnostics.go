package provider

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
)

// addAPIError turns err into diagnostics. An API refusal whose details name fields
// ({"partitions": ["may only grow"]}, or {"field": "topic"}) becomes an error on each
// attribute of that name in attrs, so Terraform points at the line of the
// configuration; anything else is one error with the API's code and message.
func addAPIError(diags *diag.Diagnostics, summary string, err error, attrs map[string]bool) {
	var apiErr *APIError
	if !errors.As(err, &apiErr) {
		diags.AddError(summary, err.Error())
		return
	}
	detail := fmt.Sprintf("Meridian answered %d %s: %s", apiErr.Status, apiErr.Code, apiErr.Message)
	named := false
	for _, field := range fieldsNamed(apiErr.Details) {
		if attrs[field] {
			message := describe(apiErr.Details[field])
			if message == "" {
				message = apiErr.Message
			}
			diags.AddAttributeError(path.Root(field), summary,
				fmt.Sprintf("%s: %s (%d %s)", field, message, apiErr.Status, apiErr.Code))
			named = true
		}
	}
	if field, ok := apiErr.Details["field"].(string); ok && attrs[field] {
		diags.AddAttributeError(path.Root(field), summary, detail)
		named = true
	}
	if !named {
		if extra := otherDetails(apiErr.Details); extra != "" {
			detail += "\n\nDetails: " + extra
		}
		diags.AddError(summary, detail)
	}
}

func fieldsNamed(details map[string]any) []string {
	fields := make([]string, 0, len(details))
	for key := range details {
		if key != "field" {
			fields = append(fields, key)
		}
	}
	sort.Strings(fields)
	return fields
}

// describe flattens a field's messages: a list of strings, or (a nested document) a map
// of sub-fields to lists, as "streams.clicks.linger_ms: must be ...".
func describe(value any) string {
	switch v := value.(type) {
	case string:
		return v
	case []any:
		parts := make([]string, 0, len(v))
		for _, item := range v {
			if text := describe(item); text != "" {
				parts = append(parts, text)
			}
		}
		return strings.Join(parts, "; ")
	case map[string]any:
		keys := fieldsNamed(v)
		parts := make([]string, 0, len(keys))
		for _, key := range keys {
			parts = append(parts, key+": "+describe(v[key]))
		}
		return strings.Join(parts, "; ")
	case nil:
		return ""
	default:
		encoded, _ := json.Marshal(v)
		return string(encoded)
	}
}

func otherDetails(details map[string]any) string {
	if len(details) == 0 {
		return ""
	}
	encoded, err := json.Marshal(details)
	if err != nil {
		return ""
	}
	return string(encoded)
}
