package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// fieldJSON is one declared column of an export or an index: a name, the dotted JSON
// path of its value in a record, and its type.
type fieldJSON struct {
	Name string `json:"name"`
	Path string `json:"path"`
	Type string `json:"type"`
}

type fieldModel struct {
	Name types.String `tfsdk:"name"`
	Path types.String `tfsdk:"path"`
	Type types.String `tfsdk:"type"`
}

var fieldType = types.ObjectType{AttrTypes: map[string]attr.Type{
	"name": types.StringType, "path": types.StringType, "type": types.StringType,
}}

func fieldsAttribute(required bool, description string, modifiers []planmodifier.List) schema.ListNestedAttribute {
	return schema.ListNestedAttribute{
		Required:      required,
		Optional:      !required,
		PlanModifiers: modifiers,
		Description:   description,
		NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
			"name": schema.StringAttribute{Required: true, Description: "The column's name."},
			"path": schema.StringAttribute{Required: true, Description: "The dotted JSON path of its value, e.g. `user.id`."},
			"type": schema.StringAttribute{Required: true,
				Validators:  []validator.String{stringvalidator.OneOf("string", "long", "double", "boolean", "timestamp")},
				Description: "`string`, `long`, `double`, `boolean` or `timestamp`."},
		}},
	}
}

func fieldsOf(ctx context.Context, list types.List, diags *diag.Diagnostics) []fieldJSON {
	out := []fieldJSON{}
	if !known(list) {
		return out
	}
	var models []fieldModel
	diags.Append(list.ElementsAs(ctx, &models, false)...)
	for _, m := range models {
		out = append(out, fieldJSON{Name: m.Name.ValueString(), Path: m.Path.ValueString(), Type: m.Type.ValueString()})
	}
	return out
}

// fieldsValue is the list of fields, null when there are none (an optional attribute
// left out).
func fieldsValue(fields []fieldJSON) types.List {
	if len(fields) == 0 {
		return types.ListNull(fieldType)
	}
	elements := make([]attr.Value, 0, len(fields))
	for _, f := range fields {
		elements = append(elements, types.ObjectValueMust(fieldType.AttrTypes, map[string]attr.Value{
			"name": types.StringValue(f.Name), "path": types.StringValue(f.Path), "type": types.StringValue(f.Type),
		}))
	}
	return types.ListValueMust(fieldType, elements)
}
